package lm

// Progress is told how far a long piece of work has come: done of total
// units (bytes of weights uploaded or made). It is called from the
// goroutine that does the work, with done rising from 0 to total; the last
// call has done == total. A nil Progress is not called. The command line
// draws a bar with it; a library user may log it or leave it nil.
type Progress func(done, total int64)

// report calls p when it is not nil.
func (p Progress) report(done, total int64) {
	if p != nil {
		p(done, total)
	}
}
