package lm

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// StateKind says how a session keeps a state its graphs declare between
// calls, and what rolling back or snapshotting does to it.
type StateKind int

// The kinds of state.
const (
	// Scratch is a fixed-size state that carries values between the
	// graphs of one call (a loop's carry between stages, a speculation
	// window's tape). It is made per (name, size) on first use and never
	// copied: rollback and snapshots ignore it.
	Scratch StateKind = iota
	// Recurrent is a fixed-size state every forward advances (a linear
	// attention's state, a conv ring, an n-gram history). It cannot go
	// back by position: a session rolls back over it only to a Snapshot,
	// which copies it.
	Recurrent
	// Slot is rows indexed by position (a KV cache): the graph declares it
	// [graph.Dyn, width]; its capacity doubles from the session's first
	// capacity as the sequence grows, keeping the rows it holds. Rolling
	// back only moves the position.
	Slot
	// Ring is rows indexed by position modulo a fixed capacity (a sliding
	// window's KV cache): declared [graph.Dyn, width], of StateSpec.Rows
	// rows, made small and grown with the sequence as a Slot is until it
	// has them (a short ring holds positions below its rows, as a slot;
	// see ops.RingHolds), so a long window costs nothing on a short
	// sequence. A rollback may go back StateSpec.Rewind rows.
	Ring
)

var stateKindNames = [...]string{"scratch", "recurrent", "slot", "ring"}

// String names the kind.
func (k StateKind) String() string {
	if k >= 0 && int(k) < len(stateKindNames) {
		return stateKindNames[k]
	}
	return fmt.Sprintf("state kind %d", int(k))
}

// StateSpec is how a session keeps one state: a model's States method
// gives it for each state name its graphs declare.
type StateSpec struct {
	Kind StateKind
	// Rows is a Ring's capacity in rows.
	Rows int
	// Rewind is how many positions a Ring can go back: its rows past the
	// window and a chunk.
	Rewind int
	// PerRow makes a Slot hold one row per PerRow positions, plus one (a
	// summary row per block of keys); 0 or 1: a row per position.
	PerRow int
}

// rowsFor gives the rows a Slot of spec needs for positions below n.
func (sp StateSpec) rowsFor(n int) int {
	if sp.Kind == Ring {
		return min(sp.Rows, n) // grown with the sequence up to its size
	}
	if sp.PerRow > 1 {
		return n/sp.PerRow + 1
	}
	return n
}

// check says whether a graph's declaration v fits the spec's kind.
func (sp StateSpec) check(v *graph.Value) error {
	dyn := len(v.Shape) > 0 && v.Shape[0] == graph.Dyn
	switch sp.Kind {
	case Scratch, Recurrent:
		if dyn {
			return fmt.Errorf("state %s: a %s state has a fixed shape", v, sp.Kind)
		}
	case Slot, Ring:
		if !dyn || len(v.Shape) != 2 {
			return fmt.Errorf("state %s: a %s state is declared [?, width]", v, sp.Kind)
		}
		if sp.Kind == Ring && (sp.Rows < 1 || sp.Rewind < 0) {
			return fmt.Errorf("state %s: a ring of %d rows rewinding %d", v, sp.Rows, sp.Rewind)
		}
	default:
		return fmt.Errorf("state %s: unknown kind %s", v, sp.Kind)
	}
	return nil
}
