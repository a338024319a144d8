package lm

// StateBytes are the bytes of the states a session keeps, now and for a
// longer sequence.
type StateBytes struct {
	// Now is the bytes of every state made so far, slots at their present
	// capacity.
	Now int64
	// At is the bytes of the same states with the slots grown to hold the
	// positions asked for (their capacity doubled from the present one, as
	// the session grows them; rings at most their rows).
	At int64
	// Slots is the part of At in Slot and Ring states (the KV caches).
	Slots int64
	// Peak is the most the states hold while the slots grow to At's
	// capacity: a slot is doubled into a new buffer before the old one is
	// freed, so the last doubling holds the slots at half the capacity
	// too.
	Peak int64
	// Capacity is the slot capacity At assumes, in positions.
	Capacity int
}

// StateBytesAt computes the bytes of the states the session has made (the
// states its graphs declared in the runs so far), and what they would be
// for a sequence of n positions: the memory a context of n needs beside
// the weights and the plans. A state no run has declared yet (a draft
// head's, before a draft) is not counted.
func (s *Session) StateBytesAt(n int) StateBytes {
	var sb StateBytes
	if s.Closed() {
		return sb
	}
	size := func(dt interface{ Size() int }, elems int) int64 { return int64(elems) * int64(dt.Size()) }
	for _, b := range s.fixed {
		sb.Now += size(b.DType(), b.Len())
	}
	for _, b := range s.rec {
		sb.Now += size(b.DType(), b.Len())
	}
	sb.At = sb.Now
	sb.Capacity = max(s.capacity, s.opts.Capacity, 1)
	for sb.Capacity < n {
		sb.Capacity *= 2
	}
	sb.Peak = sb.At
	for _, sl := range s.slots {
		now := size(sl.buf.DType(), sl.buf.Len())
		at := size(sl.buf.DType(), sl.spec.rowsFor(sb.Capacity)*sl.width)
		sb.Now += now
		sb.At += at
		sb.Slots += at
		sb.Peak += at
		if at != now {
			// the last doubling: from half the capacity, or from now
			sb.Peak += size(sl.buf.DType(), sl.spec.rowsFor(max(sb.Capacity/2, s.capacity))*sl.width)
		}
	}
	return sb
}
