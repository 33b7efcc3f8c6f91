"""Third-party-style scripts run unmodified under `python -m torch_fl.run --device ral:N`
from another folder and end where `python script.py` (CPU) ends. Each script is written here
after the behaviour of a pytorch/examples program (not vendored): word_language_model (a
sibling `data` module, LSTM and Transformer, manual SGD through `p.data.add_`, gradient
clipping, torch.save/torch.load of the whole model, flatten_parameters), regression (a
`param.data.add_(-lr * grad)` loop until the loss is small) and time_sequence_prediction
(LSTMCell in float64, LBFGS with a closure, numpy data through torch.save/torch.load) and
reinforcement_learning's actor_critic (Categorical sampling, numpy states through
torch.from_numpy, `torch.tensor([R])` of 0-d tensors, `.item()` per step, Adam), here on a
small numpy environment instead of gymnasium's CartPole."""

import json
import os
import subprocess
import sys

import pytest
import torch

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]

DATA = """
import torch

def corpus(n=600, vocab=50, seed=3):
    g = torch.Generator().manual_seed(seed)
    # a learnable sequence: each token mostly follows from the previous one
    seq = [0]
    for _ in range(n - 1):
        seq.append((seq[-1] * 7 + 3) % vocab if torch.rand(1, generator=g) < 0.8 else int(torch.randint(vocab, (1,), generator=g)))
    return torch.tensor(seq)
"""

WORD_LM = """
import argparse, json, math, sys
import torch, torch.nn as nn
import data

p = argparse.ArgumentParser()
p.add_argument("--model", default="LSTM")
p.add_argument("--save", required=True)
a = p.parse_args()
torch.manual_seed(1111)
device = torch.device("cpu")  # as the example does without --accel: CPU parameters under the mode
ntok, bptt, bs, lr = 50, 10, 4, 2.0

class Net(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.emb = nn.Embedding(ntok, 16)
        if kind == "LSTM":
            self.rnn = nn.LSTM(16, 16, 2, dropout=0.2)
        else:
            layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.2)
            self.rnn = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(16, ntok)

    def forward(self, x, h=None):
        e = self.drop(self.emb(x))
        if self.kind == "LSTM":
            y, h = self.rnn(e, h)
        else:
            mask = nn.Transformer.generate_square_subsequent_mask(len(x))
            y = self.rnn(e, mask)
        return self.out(self.drop(y)), h

def batchify(d):
    n = d.size(0) // bs
    return d[: n * bs].view(bs, -1).t().contiguous().to(device)

train = batchify(data.corpus())
model = Net(a.model).to(device)
crit = nn.NLLLoss()

def detach(h):
    return None if h is None else tuple(v.detach() for v in h)

def evaluate(src):
    model.eval()
    total, h = 0.0, None
    with torch.no_grad():
        for i in range(0, src.size(0) - 1, bptt):
            x, y = src[i : i + bptt], src[i + 1 : i + 1 + bptt]
            x = x[: len(y)]
            out, h = model(x, h)
            total += len(x) * crit(torch.log_softmax(out, -1).view(-1, ntok), y.reshape(-1)).item()
    return total / (src.size(0) - 1)

model.train()
h = None
for i in range(0, train.size(0) - 1, bptt):
    x, y = train[i : i + bptt], train[i + 1 : i + 1 + bptt]
    x = x[: len(y)]
    h = detach(h)
    model.zero_grad()
    out, h = model(x, h)
    loss = crit(torch.log_softmax(out, -1).view(-1, ntok), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for q in model.parameters():
        q.data.add_(q.grad, alpha=-lr)
with open(a.save, "wb") as f:
    torch.save(model, f)
with open(a.save, "rb") as f:
    model = torch.load(f, weights_only=False)
if a.model == "LSTM":
    model.rnn.flatten_parameters()
print(json.dumps({"final": evaluate(train)}))
"""

REGRESSION = """
import json
from itertools import count
import torch
import torch.nn.functional as F

torch.manual_seed(7)
W = torch.randn(4, 1) * 5
b = torch.randn(1) * 5

def features(x):
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, 5)], 1)

fc = torch.nn.Linear(4, 1)
for n in count(1):
    x = features(torch.randn(32))
    y = x.mm(W) + b.item()
    fc.zero_grad()
    out = F.smooth_l1_loss(fc(x), y)
    loss = out.item()
    out.backward()
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)
    if loss < 1e-3 or n == 3000:
        break
print(json.dumps({"final": loss, "batches": n}))
"""

TIME_SEQ = """
import json
import numpy as np
import torch, torch.nn as nn, torch.optim as optim

np.random.seed(2)
x = np.empty((8, 40), "int64")
x[:] = np.array(range(40)) + np.random.randint(-80, 80, 8).reshape(8, 1)
torch.save(np.sin(x / 20.0).astype("float64"), open("traindata.pt", "wb"))

class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.lin = nn.LSTMCell(1, 12), nn.LSTMCell(12, 12), nn.Linear(12, 1)

    def forward(self, inp, future=0):
        outs = []
        h = c = torch.zeros(inp.size(0), 12, dtype=torch.double)
        h2 = c2 = torch.zeros(inp.size(0), 12, dtype=torch.double)
        for t in inp.split(1, dim=1):
            h, c = self.l1(t, (h, c))
            h2, c2 = self.l2(h, (h2, c2))
            out = self.lin(h2)
            outs += [out]
        for _ in range(future):
            h, c = self.l1(out, (h, c))
            h2, c2 = self.l2(h, (h2, c2))
            out = self.lin(h2)
            outs += [out]
        return torch.cat(outs, dim=1)

np.random.seed(0)
torch.manual_seed(0)
data = torch.load("traindata.pt", weights_only=False)
inp, target = torch.from_numpy(data[3:, :-1]), torch.from_numpy(data[3:, 1:])
test_inp, test_target = torch.from_numpy(data[:3, :-1]), torch.from_numpy(data[:3, 1:])
seq = Seq()
seq.double()
crit = nn.MSELoss()
opt = optim.LBFGS(seq.parameters(), lr=0.8, max_iter=5)
for _ in range(2):
    def closure():
        opt.zero_grad()
        loss = crit(seq(inp), target)
        loss.backward()
        return loss
    opt.step(closure)
with torch.no_grad():
    pred = seq(test_inp, future=5)
    loss = crit(pred[:, :-5], test_target)
    y = pred.detach().numpy()
print(json.dumps({"final": loss.item(), "pred_sum": float(y.sum())}))
"""

ACTOR_CRITIC = """
import json
from collections import namedtuple
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F, torch.optim as optim
from torch.distributions import Categorical

class Pole:  # a cart-pole-like numpy environment: reward 1 per step until it falls
    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)
    def reset(self):
        self.s = self.rng.uniform(-0.05, 0.05, size=4)
        return self.s.copy()
    def step(self, action):
        x, v, a, w = self.s
        force = 1.0 if action == 1 else -1.0
        w = w + 0.05 * (9.8 * np.sin(a) - force * np.cos(a))
        a, v = a + 0.05 * w, v + 0.05 * force
        x = x + 0.05 * v
        self.s = np.array([x, v, a, w])
        done = abs(a) > 0.4 or abs(x) > 2.4
        return self.s.copy(), 1.0, done

SavedAction = namedtuple("SavedAction", ["log_prob", "value"])

class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 64)
        self.action_head, self.value_head = nn.Linear(64, 2), nn.Linear(64, 1)
        self.saved_actions, self.rewards = [], []
    def forward(self, x):
        x = F.relu(self.affine1(x))
        return F.softmax(self.action_head(x), dim=-1), self.value_head(x)

torch.manual_seed(543)
env, model = Pole(543), Policy()
opt = optim.Adam(model.parameters(), lr=3e-2)
eps = np.finfo(np.float32).eps.item()
lengths, losses = [], []
for episode in range(12):
    state = env.reset()
    for t in range(1, 60):
        probs, value = model(torch.from_numpy(state).float())
        m = Categorical(probs)
        action = m.sample()
        model.saved_actions.append(SavedAction(m.log_prob(action), value))
        state, reward, done = env.step(action.item())
        model.rewards.append(reward)
        if done:
            break
    lengths.append(t)
    R, returns = 0, []
    for r in model.rewards[::-1]:
        R = r + 0.99 * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    policy_losses, value_losses = [], []
    for (log_prob, value), R in zip(model.saved_actions, returns):
        advantage = R - value.item()
        policy_losses.append(-log_prob * advantage)
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
    opt.zero_grad()
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    del model.rewards[:], model.saved_actions[:]
print(json.dumps({"final": losses[-1], "lengths": lengths, "param_sum": float(sum(p.sum() for p in model.parameters()))}))
"""

SCRIPTS = {
    "word_lm_lstm": (WORD_LM, ["--model", "LSTM", "--save", "m.pt"], 1e-4),
    "word_lm_transformer": (WORD_LM, ["--model", "Transformer", "--save", "m.pt"], 1e-4),
    "regression": (REGRESSION, [], None),  # same batch count and loss within float32 noise
    "time_sequence": (TIME_SEQ, [], 1e-9),  # float64 throughout
    # the same sampled actions (episode lengths equal), losses within float32 noise
    "actor_critic": (ACTOR_CRITIC, [], 1e-4),
}


def _run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{cmd}: {r.stderr[-3000:]}"
    return json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    """Each script in its own project folder beside a `data` module, and its CPU result
    (`python main.py` from another folder), computed once for both devices."""
    root = tmp_path_factory.mktemp("examples")
    cpu = {}

    def get(name):
        proj = root / name
        if name not in cpu:
            proj.mkdir()
            (proj / "data.py").write_text(DATA)
            (proj / "main.py").write_text(SCRIPTS[name][0])
            run_dir = root / f"{name}_cpu"
            run_dir.mkdir()
            cpu[name] = _run([sys.executable, str(proj / "main.py"), *SCRIPTS[name][1]], run_dir)
        return str(proj / "main.py"), cpu[name]

    return get


@pytest.mark.parametrize("name", sorted(SCRIPTS))
@pytest.mark.parametrize("device", DEVICES)
def test_script_ends_where_cpu_ends(tmp_path, scripts, device, name):
    _, args, rtol = SCRIPTS[name]
    script, want = scripts(name)
    got = _run([sys.executable, "-m", "torch_fl.run", "--device", device, script, *args], tmp_path)
    if name == "regression":
        assert got["batches"] == want["batches"] < 3000
        assert got["final"] == pytest.approx(want["final"], rel=1e-2, abs=1e-5)
    else:
        assert got["final"] == pytest.approx(want["final"], rel=rtol)
    for key in set(want) - {"final", "batches"}:
        if isinstance(want[key], list):
            assert got[key] == want[key], key
        else:
            assert got[key] == pytest.approx(want[key], rel=1e-6 if name != "actor_critic" else 1e-4), key
