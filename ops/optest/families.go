package optest

// qwenCases are the cases of the ops Qwen4-Exp adds (ops/qwen*.go); their
// author fills this list, with references beside them in this package
// (qwen_cases.go).
func qwenCases() []Case { return qwenOpCases() }
