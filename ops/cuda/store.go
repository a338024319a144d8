package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Binder of store.

func bindStore(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	src, dst := in[0], in[1]
	if src.dt != dst.dt || src.store != dst.store || src.n != dst.n {
		return nil, fmt.Errorf("store of %d %s elements into %d %s elements", src.n, src.dt, dst.n, dst.dt)
	}
	s := be.newSteps()
	s.copyBytes(dst.ptr, src.ptr, src.n*src.store.Size())
	return s, nil
}
