package dory

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// engine runs stage graphs by key on bound buffers.
type engine interface {
	Run(key Key, build func() (*graph.Graph, error), bind map[string]ops.Buffer) ([]ops.Buffer, error)
	Close() error
}

// plainEngine binds each key's graph once with ops.Runner and rebinds when a
// buffer changes.
type plainEngine struct {
	be      ops.Backend
	entries map[Key]*plainEntry
}

type plainEntry struct {
	g     *graph.Graph
	r     *ops.Runner
	bound []ops.Buffer
}

func newPlainEngine(be ops.Backend) *plainEngine {
	return &plainEngine{be: be, entries: map[Key]*plainEntry{}}
}

func (e *plainEngine) Run(key Key, build func() (*graph.Graph, error), bind map[string]ops.Buffer) ([]ops.Buffer, error) {
	en := e.entries[key]
	if en == nil {
		g, err := build()
		if err != nil {
			return nil, err
		}
		en = &plainEntry{g: g}
		e.entries[key] = en
	}
	leaves := make([]ops.Buffer, 0, len(en.g.Values))
	byValue := map[*graph.Value]ops.Buffer{}
	for _, v := range en.g.Values {
		if v.Kind == graph.Temp {
			continue
		}
		b, ok := bind[v.Name]
		if !ok {
			return nil, fmt.Errorf("%s: %s %s is not bound", key, v.Kind, v.Name)
		}
		leaves = append(leaves, b)
		byValue[v] = b
	}
	if en.r == nil || !sameBuffers(en.bound, leaves) {
		if en.r != nil {
			en.r.Close()
		}
		r, err := ops.NewRunner(e.be, en.g, byValue)
		if err != nil {
			en.r = nil
			return nil, err
		}
		en.r, en.bound = r, leaves
	}
	if err := en.r.Run(); err != nil {
		return nil, err
	}
	out := make([]ops.Buffer, len(en.g.Outputs))
	for i, v := range en.g.Outputs {
		out[i] = en.r.Buffer(v)
	}
	return out, nil
}

func sameBuffers(a, b []ops.Buffer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] || a[i].Len() != b[i].Len() {
			return false
		}
	}
	return true
}

func (e *plainEngine) Close() error {
	for _, en := range e.entries {
		if en.r != nil {
			en.r.Close()
		}
	}
	e.entries = nil
	return nil
}
