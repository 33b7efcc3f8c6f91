"""Known ModuleInfo conformance failures: "[<dev>/]<style or *>:<module>:<dtype>" -> reason
("*" = both styles; no device = both devices).

Reviewed against a full sweep (`python -m torch_fl.tools.sweep module`, or
`pytest tests/test_module_db.py -m slow`); test_module_db fails if an entry starts passing, so
the list stays true. "tracked:" entries are bugs another branch fixes: remove them when it
merges (the strict check names each one that starts passing).
"""

_LAZY = (
    "lazy modules moved to ral before their first forward: UninitializedParameter.to(ral) returns "
    "a plain RalTensor of shape [0] (RalTensor is a Python tensor subclass and cannot also be an "
    "UninitializedParameter), so the module never materializes its weights"
)
_RNN = (
    "tracked: nn.LSTM/GRU and their cells call aten::_thnn_fused_lstm_cell/_thnn_fused_gru_cell, "
    "which have no CPU kernel for the cpu tier to serve (issue 12, LSTM/GRU)"
)

XFAIL: dict[str, str] = {
    "device:nn.LazyConv1d:float32": _LAZY,
    "device:nn.LazyConv2d:float32": _LAZY,
    "device:nn.LazyConv3d:float32": _LAZY,
    "device:nn.LazyConvTranspose1d:float32": _LAZY,
    "device:nn.LazyConvTranspose2d:float32": _LAZY,
    "device:nn.LazyConvTranspose3d:float32": _LAZY,
    "*:nn.GRU:float32": _RNN,
    "*:nn.GRUCell:float32": _RNN,
    "*:nn.LSTM:float32": _RNN,
    "*:nn.LSTMCell:float32": _RNN,
}
