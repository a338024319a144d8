package cpu

// qwenKernels are the kernels of the ops Qwen4-Exp adds.
var qwenKernels = map[string]kernelFunc{}
