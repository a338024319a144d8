package cuda

import (
	"fmt"
	"strconv"

	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// aheadMaxBytes is the most bytes of the next node's weights a
// latency-bound launch asks L2 for (LinkSteps): about half the H200's 60
// MB of L2, so the prefetched lines outlast the keys and values attention
// reads meanwhile.
const aheadMaxBytes = 32 << 20

// LinkSteps lets each bound step that has a launch for it (decode
// attention's attn_part: a few dozen keys a block, bound by latency) ask
// L2, before its wait on the kernel before it, for the weights that the
// next step's product streams first (o_proj's after attention), up to
// the backend's cap (aheadMaxBytes, REEL_AHEAD_L2). The memory then works
// through the attention's latency instead of idling, and the product
// finds its first lines in L2. It changes no result: a prefetch reads
// nothing into a thread. Steps are in the order they run; steps of
// other backends are passed over.
func (be *Backend) LinkSteps(all []ops.Step) {
	linkAhead(all, be.aheadBytes)
}

// linkAhead fills, for each step of all with an ahead launch followed by
// a step that streams weights, that launch's last two arguments with the
// address and the bytes (at most max; none when max is not positive) of
// the next step's first stream; it clears them where there is none, so
// that a relinked plan never keeps an old address.
func linkAhead(all []ops.Step, max int64) {
	for i, st := range all {
		s, ok := st.(*steps)
		if !ok || s == nil || s.ahead == nil {
			continue
		}
		var sp span
		if i+1 < len(all) && max > 0 {
			if nx, ok := all[i+1].(*steps); ok && nx != nil && len(nx.streams) > 0 {
				sp = nx.streams[0]
				sp.bytes = min(sp.bytes, max)
			}
		}
		n := len(s.ahead.args)
		s.ahead.args[n-2], s.ahead.args[n-1] = sp.ptr, sp.bytes
	}
}

// aheadArgs are the two trailing arguments of a launch that LinkSteps
// fills: no address and no bytes until it does.
func aheadArgs() []any { return []any{cu.DevicePtr(0), int64(0)} }

// parseAheadL2 reads REEL_AHEAD_L2: "" for aheadMaxBytes, "0" for no
// prefetch ahead, or the most MiB to ask for.
func parseAheadL2(v string) (int64, error) {
	if v == "" {
		return aheadMaxBytes, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1<<16 {
		return 0, fmt.Errorf("REEL_AHEAD_L2=%q: want the MiB to prefetch ahead, 0 for none", v)
	}
	return int64(n) << 20, nil
}
