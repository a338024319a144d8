package trace

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/weights"
)

// The safetensors layout of a recording. Each record is a tensor named
// "NAME#CALL" in its own dtype and shape; the file's __metadata__ holds
// FormatKey = FormatVersion and, under each tensor's name, a JSON object
// describing it:
//
//	{"name": "layer 2 / attn / attn_out", "op": "matmul", "scope": "layer 2 / attn",
//	 "graph": "llama/rows 3 want all", "call": 0, "index": 17, "pos": [0, 3]}
//
// "pos" is the range of positions of the call ([-1, -1] when unknown);
// "index" orders the records (graph order within a call). A reference
// implementation writes the same (tools/trace_hf.py).
const (
	FormatKey     = "reel.trace"
	FormatVersion = "1"
)

// meta is a record's __metadata__ entry.
type meta struct {
	Name  string `json:"name"`
	Op    string `json:"op,omitempty"`
	Scope string `json:"scope,omitempty"`
	Graph string `json:"graph,omitempty"`
	Call  int    `json:"call"`
	Index int    `json:"index"`
	Pos   [2]int `json:"pos"`
	DType string `json:"dtype,omitempty"`
}

// TensorName is the tensor name of a record in a file: "NAME#CALL".
func TensorName(name string, call int) string { return fmt.Sprintf("%s#%d", name, call) }

// Write writes records to path as a safetensors file.
func Write(path string, recs []Record) error {
	ts := make([]weights.NamedTensor, len(recs))
	md := map[string]string{FormatKey: FormatVersion}
	for i, r := range recs {
		name := TensorName(r.Name, r.Call)
		ts[i] = weights.NamedTensor{Name: name, DType: r.DType, Shape: r.Shape, Data: r.Data}
		m := meta{Name: r.Name, Op: r.Op, Scope: r.Scope, Graph: r.Graph, Call: r.Call, Index: r.Index, Pos: [2]int{-1, -1}, DType: r.DType.String()}
		if r.Pos >= 0 {
			m.Pos = [2]int{r.Pos, r.Pos + r.Rows}
		}
		raw, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("trace: %s: %w", name, err)
		}
		if _, dup := md[name]; dup {
			return fmt.Errorf("trace: %s: %s recorded twice in one call", path, name)
		}
		md[name] = string(raw)
	}
	if err := weights.WriteFileMetadata(path, ts, md); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}

// Read reads a recording Write (or tools/trace_hf.py) wrote, in record
// order. Every tensor needs its metadata entry; an error names the file
// and the tensor.
func Read(path string) ([]Record, error) {
	f, err := weights.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	md := f.Metadata()
	if v := md[FormatKey]; v != FormatVersion {
		return nil, fmt.Errorf("trace: %s: not a trace (metadata %q is %q, want %q)", path, FormatKey, v, FormatVersion)
	}
	var recs []Record
	for _, name := range f.Names() {
		raw, ok := md[name]
		if !ok {
			return nil, fmt.Errorf("trace: %s: tensor %q has no metadata entry", path, name)
		}
		var m meta
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			return nil, fmt.Errorf("trace: %s: tensor %q: metadata: %w", path, name, err)
		}
		if m.Name == "" || m.Call < 0 {
			return nil, fmt.Errorf("trace: %s: tensor %q: metadata without a name or with call %d", path, name, m.Call)
		}
		info, err := f.Info(name)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		data, err := f.Bytes(name)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		r := Record{Name: m.Name, Op: m.Op, Scope: m.Scope, Graph: m.Graph, Call: m.Call, Index: m.Index,
			Pos: -1, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), data...)}
		if m.Pos[0] >= 0 && m.Pos[1] >= m.Pos[0] {
			r.Pos, r.Rows = m.Pos[0], m.Pos[1]-m.Pos[0]
		}
		if r.DType == graph.Invalid {
			return nil, fmt.Errorf("trace: %s: tensor %q: no dtype", path, name)
		}
		recs = append(recs, r)
	}
	slices.SortStableFunc(recs, func(a, b Record) int {
		if a.Index != b.Index {
			return a.Index - b.Index
		}
		return a.Call - b.Call
	})
	return recs, nil
}
