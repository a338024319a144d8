// Package graph is Reel's intermediate representation: static dataflow
// graphs of ops over tensors. A Value is a tensor with a dtype, a shape
// and a kind (an input written per call, a weight bound by checkpoint
// name, a state such as a KV cache that persists across calls, or a
// temporary); a Node applies an op to values, and carries the scope it was
// built in ("layer 3 / attn") and the states it writes.
//
// Model code builds graphs with a Builder, which checks each node's shapes
// and dtypes against its op's rule as it is added (the ops live in package
// ops) and keeps the first error, naming the node, its scope and the
// shapes. Order gives a topological order that keeps state accesses in
// build order, Validate checks a graph again, and WriteText, WriteDOT and
// WriteJSON dump it. Package planner turns a graph into a plan a backend
// runs (see its Example).
package graph
