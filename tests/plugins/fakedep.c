/* fakedep.c -- stands in for a vendor runtime library that a plugin links against. */
__attribute__((visibility("default"))) int fakedep_present(void) { return 1; }
