package cpu

// kernels is the CPU kernel of every op, by op name; built once, never changed.
var kernels = func() map[string]kernelFunc {
	m := map[string]kernelFunc{}
	for name, k := range commonKernels {
		m[name] = k
	}
	for name, k := range qwenKernels {
		m[name] = k
	}
	return m
}()

// commonKernels are the kernels of the ops every model uses.
var commonKernels = map[string]kernelFunc{}
