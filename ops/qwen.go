package ops

// qwenDefs are the ops Qwen4-Exp adds (gated residual streams, Gated DeltaNet,
// QSA, PLE, MoE); they are registered beside the common ones.
var qwenDefs = []*Def{}
