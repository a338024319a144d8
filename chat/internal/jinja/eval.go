package jinja

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Error is a template error: a syntax error found by Parse or a failure
// while rendering, with the template line where it happened (0 when not
// known).
type Error struct {
	Line int
	Msg  string
	// Raised marks an error the template raised itself with
	// raise_exception; Msg is then its message.
	Raised bool
}

// Error gives the line (when known) and the message.
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// Template is a parsed template.
type Template struct{ body []node }

// Parse parses template source.
func Parse(src string) (*Template, error) {
	body, err := parse(src)
	if err != nil {
		return nil, err
	}
	return &Template{body}, nil
}

// Limits on one render, so that no template or input runs without bound.
const (
	maxOutput   = 64 << 20   // bytes written, captured blocks included
	maxSteps    = 20_000_000 // loop iterations, calls and filters
	maxCalls    = 200        // nested macro calls
	maxRange    = 100_000    // items of range(), as Jinja's sandbox has it
	maxStrBytes = maxOutput  // bytes of any string a template builds
)

// Options are the environment's hooks.
type Options struct {
	// Now is the clock of strftime_now; nil means time.Now.
	Now func() time.Time
}

// Render renders the template with vars as its context. A template is
// safe to render from several goroutines at once.
func (t *Template) Render(vars map[string]Value, opts Options) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = "", &Error{Msg: fmt.Sprintf("internal error: %v", p)}
		}
	}()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &renderer{opts: opts, out: &strings.Builder{}}
	globals := &scope{vars: r.globals()}
	ctx := &scope{vars: vars, parent: globals}
	root := &scope{vars: map[string]Value{}, parent: ctx}
	err = r.exec(t.body, root)
	if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
		err = &Error{Msg: "break or continue outside a loop"}
	}
	if err != nil {
		return "", err
	}
	return r.out.String(), nil
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

type scope struct {
	vars   map[string]Value
	parent *scope
}

func (s *scope) lookup(name string) (Value, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (s *scope) child() *scope { return &scope{vars: map[string]Value{}, parent: s} }

type renderer struct {
	opts    Options
	out     *strings.Builder
	written int
	steps   int
	calls   int
}

func (r *renderer) write(s string) error {
	r.written += len(s)
	if r.written > maxOutput {
		return fmt.Errorf("output longer than %d bytes", maxOutput)
	}
	r.out.WriteString(s)
	return nil
}

// step counts one unit of work against the budget.
func (r *renderer) step() error {
	r.steps++
	if r.steps > maxSteps {
		return fmt.Errorf("template took more than %d steps", maxSteps)
	}
	return nil
}

// located gives err the line of the node it happened at, unless it has one.
func located(line int, err error) error {
	if err == nil || errors.Is(err, errBreak) || errors.Is(err, errContinue) {
		return err
	}
	var te *Error
	if errors.As(err, &te) {
		if te.Line == 0 {
			te.Line = line
		}
		return te
	}
	return &Error{Line: line, Msg: err.Error()}
}

// capture renders body into a string.
func (r *renderer) capture(body []node, sc *scope) (string, error) {
	saved := r.out
	r.out = &strings.Builder{}
	err := r.exec(body, sc)
	s := r.out.String()
	r.out = saved
	return s, err
}

func (r *renderer) exec(body []node, sc *scope) error {
	for _, n := range body {
		if err := r.execNode(n, sc); err != nil {
			return located(n.nodeLine(), err)
		}
	}
	return nil
}

func (r *renderer) execNode(n node, sc *scope) error {
	switch n := n.(type) {
	case *textNode:
		return r.write(n.text)
	case *outputNode:
		v, err := r.eval(n.x, sc)
		if err != nil {
			return err
		}
		return r.write(toStr(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, sc)
			if err != nil {
				return err
			}
			if truth(v) {
				return r.exec(n.bodies[i], sc)
			}
		}
		return r.exec(n.orElse, sc)
	case *forNode:
		it, err := r.eval(n.iter, sc)
		if err != nil {
			return err
		}
		_, err = r.loop(n, it, sc, 1)
		return err
	case *setNode:
		v, err := r.eval(n.x, sc)
		if err != nil {
			return err
		}
		return r.assign(n.target, v, sc)
	case *setBlockNode:
		s, err := r.capture(n.body, sc.child())
		if err != nil {
			return err
		}
		var v Value = s
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return err
			}
		}
		return r.assign(n.target, v, sc)
	case *macroNode:
		sc.vars[n.name] = r.macro(n.name, n.params, n.defaults, n.body, sc)
		return nil
	case *callBlockNode:
		caller := r.macro("caller", n.params, n.defaults, n.body, sc)
		v, err := r.evalCall(n.call, sc, caller)
		if err != nil {
			return err
		}
		return r.write(toStr(v))
	case *filterBlockNode:
		s, err := r.capture(n.body, sc.child())
		if err != nil {
			return err
		}
		var v Value = s
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return err
			}
		}
		return r.write(toStr(v))
	case *withNode:
		inner := sc.child()
		for i, t := range n.targets {
			v, err := r.eval(n.values[i], sc)
			if err != nil {
				return err
			}
			if err := r.assign(t, v, inner); err != nil {
				return err
			}
		}
		return r.exec(n.body, inner)
	case *scopeNode:
		return r.exec(n.body, sc)
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	}
	return fmt.Errorf("unknown node %T", n)
}

// loopInfo is the loop variable of a for loop.
type loopInfo struct {
	items   []Value
	index   int
	depth   int
	node    *forNode
	scope   *scope
	changed Value
	seen    bool
}

// loop runs a for loop over it; with a recursive loop, loop(x) calls it
// again one level deeper and returns what it renders.
func (r *renderer) loop(n *forNode, it Value, sc *scope, depth int) (string, error) {
	items, err := iterate(it)
	if err != nil {
		return "", err
	}
	if n.cond != nil {
		var kept []Value
		for _, item := range items {
			if err := r.step(); err != nil {
				return "", err
			}
			inner := sc.child()
			if err := r.assign(n.target, item, inner); err != nil {
				return "", err
			}
			v, err := r.eval(n.cond, inner)
			if err != nil {
				return "", err
			}
			if truth(v) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	info := &loopInfo{items: items, depth: depth, node: n, scope: sc}
	for i, item := range items {
		if err := r.step(); err != nil {
			return "", err
		}
		info.index = i
		inner := sc.child()
		inner.vars["loop"] = info
		if err := r.assign(n.target, item, inner); err != nil {
			return "", err
		}
		err := r.exec(n.body, inner)
		if errors.Is(err, errBreak) {
			break
		}
		if err != nil && !errors.Is(err, errContinue) {
			return "", err
		}
	}
	if len(items) == 0 {
		return "", r.exec(n.orElse, sc.child())
	}
	return "", nil
}

// assign binds v to a target: a name, a tuple of names (unpacking v), or
// a namespace's attribute.
func (r *renderer) assign(target expr, v Value, sc *scope) error {
	switch t := target.(type) {
	case *nameExpr:
		sc.vars[t.name] = v
		return nil
	case *tupleExpr:
		items, err := iterate(v)
		if err != nil {
			return fmt.Errorf("cannot unpack: %w", err)
		}
		if len(items) != len(t.items) {
			if len(items) > len(t.items) {
				return fmt.Errorf("too many values to unpack (expected %d)", len(t.items))
			}
			return fmt.Errorf("not enough values to unpack (expected %d, got %d)", len(t.items), len(items))
		}
		for i, x := range t.items {
			if err := r.assign(x, items[i], sc); err != nil {
				return err
			}
		}
		return nil
	case *attrExpr:
		name := t.x.(*nameExpr).name
		obj, ok := sc.lookup(name)
		if !ok {
			return fmt.Errorf("'%s' is undefined", name)
		}
		ns, ok := obj.(*Namespace)
		if !ok {
			return fmt.Errorf("cannot assign attribute on non-namespace object")
		}
		return ns.attrs.Set(t.name, v)
	}
	return fmt.Errorf("cannot assign to %T", target)
}

// macro makes the callable of a macro (or of a call block's caller).
func (r *renderer) macro(name string, params []string, defaults []expr, body []node, def *scope) *Func {
	return &Func{name: name, call: func(r *renderer, args []Value, kwargs *Dict) (Value, error) {
		r.calls++
		defer func() { r.calls-- }()
		if r.calls > maxCalls {
			return nil, fmt.Errorf("macro calls nested more than %d deep", maxCalls)
		}
		if err := r.step(); err != nil {
			return nil, err
		}
		sc := def.child()
		firstDefault := len(params) - len(defaults)
		for i, p := range params {
			switch {
			case i < len(args):
				sc.vars[p] = args[i]
			default:
				if v, ok := kwargs.Get(p); ok {
					sc.vars[p] = v
					continue
				}
				if i >= firstDefault {
					v, err := r.eval(defaults[i-firstDefault], sc)
					if err != nil {
						return nil, err
					}
					sc.vars[p] = v
					continue
				}
				sc.vars[p] = Undefined{fmt.Sprintf("parameter '%s' was not provided", p)}
			}
		}
		var extra Tuple
		if len(args) > len(params) {
			extra = Tuple(args[len(params):])
		}
		sc.vars["varargs"] = extra
		if extra == nil {
			sc.vars["varargs"] = Tuple{}
		}
		rest := NewDict()
		for i, k := range kwargs.keys {
			known := false
			for _, p := range params {
				if k == p {
					known = true
				}
			}
			if !known {
				rest.Set(k, kwargs.vals[i])
			}
		}
		sc.vars["kwargs"] = rest
		if c, ok := kwargs.Get("caller"); ok {
			sc.vars["caller"] = c
		}
		return r.capture(body, sc)
	}}
}

func (r *renderer) eval(x expr, sc *scope) (Value, error) {
	v, err := r.evalExpr(x, sc)
	if err != nil {
		return nil, located(x.exprLine(), err)
	}
	return v, nil
}

func (r *renderer) evalExpr(x expr, sc *scope) (Value, error) {
	switch x := x.(type) {
	case *constExpr:
		return x.v, nil
	case *nameExpr:
		if v, ok := sc.lookup(x.name); ok {
			return v, nil
		}
		return undefinedName(x.name), nil
	case *attrExpr:
		obj, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, x.name)
	case *itemExpr:
		obj, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		if s, ok := x.key.(*sliceExpr); ok {
			return r.slice(obj, s, sc)
		}
		key, err := r.eval(x.key, sc)
		if err != nil {
			return nil, err
		}
		return getItem(obj, key)
	case *callExpr:
		return r.evalCall(x, sc, nil)
	case *filterExpr:
		var v Value
		if x.x != nil {
			var err error
			if v, err = r.eval(x.x, sc); err != nil {
				return nil, err
			}
		}
		return r.applyFilter(x, v, sc)
	case *testExpr:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		args, kwargs, err := r.evalArgs(x.args, x.kwargs, sc)
		if err != nil {
			return nil, err
		}
		ok, err := r.test(x.name, v, args, kwargs)
		if err != nil {
			return nil, err
		}
		return ok != x.negate, nil
	case *binExpr:
		l, err := r.eval(x.l, sc)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "and":
			if !truth(l) {
				return l, nil
			}
			return r.eval(x.r, sc)
		case "or":
			if truth(l) {
				return l, nil
			}
			return r.eval(x.r, sc)
		}
		rv, err := r.eval(x.r, sc)
		if err != nil {
			return nil, err
		}
		return binary(x.op, l, rv)
	case *unaryExpr:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		return unary(x.op, v)
	case *compareExpr:
		l, err := r.eval(x.first, sc)
		if err != nil {
			return nil, err
		}
		for i, op := range x.ops {
			rv, err := r.eval(x.rest[i], sc)
			if err != nil {
				return nil, err
			}
			ok, err := compare(op, l, rv)
			if err != nil || !ok {
				return false, err
			}
			l = rv
		}
		return true, nil
	case *concatExpr:
		var b strings.Builder
		for _, p := range x.parts {
			v, err := r.eval(p, sc)
			if err != nil {
				return nil, err
			}
			b.WriteString(toStr(v))
			if b.Len() > maxStrBytes {
				return nil, fmt.Errorf("string longer than %d bytes", maxStrBytes)
			}
		}
		return b.String(), nil
	case *condExpr:
		c, err := r.eval(x.test, sc)
		if err != nil {
			return nil, err
		}
		if truth(c) {
			return r.eval(x.then, sc)
		}
		if x.orElse == nil {
			return Undefined{"the inline if-expression evaluated to false and no else section was defined."}, nil
		}
		return r.eval(x.orElse, sc)
	case *listExpr:
		vs, err := r.evalAll(x.items, sc)
		if err != nil {
			return nil, err
		}
		return List(vs), nil
	case *tupleExpr:
		vs, err := r.evalAll(x.items, sc)
		if err != nil {
			return nil, err
		}
		return Tuple(vs), nil
	case *dictExpr:
		d := NewDict()
		for i, k := range x.keys {
			kv, err := r.eval(k, sc)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(x.vals[i], sc)
			if err != nil {
				return nil, err
			}
			if err := d.Set(kv, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *sliceExpr:
		return nil, fmt.Errorf("slice outside a subscript")
	}
	return nil, fmt.Errorf("unknown expression %T", x)
}

// evalAll evaluates xs in order.
func (r *renderer) evalAll(xs []expr, sc *scope) ([]Value, error) {
	out := make([]Value, len(xs))
	for i, x := range xs {
		v, err := r.eval(x, sc)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (r *renderer) evalArgs(argx []expr, kwx []kwarg, sc *scope) ([]Value, *Dict, error) {
	args, err := r.evalAll(argx, sc)
	if err != nil {
		return nil, nil, err
	}
	kwargs := NewDict()
	for _, kw := range kwx {
		v, err := r.eval(kw.x, sc)
		if err != nil {
			return nil, nil, err
		}
		kwargs.Set(kw.name, v)
	}
	return args, kwargs, nil
}

func (r *renderer) evalCall(x *callExpr, sc *scope, caller *Func) (Value, error) {
	fn, err := r.eval(x.fn, sc)
	if err != nil {
		return nil, err
	}
	args, kwargs, err := r.evalArgs(x.args, x.kwargs, sc)
	if err != nil {
		return nil, err
	}
	if caller != nil {
		kwargs.Set("caller", caller)
	}
	return r.call(fn, args, kwargs)
}

func (r *renderer) call(fn Value, args []Value, kwargs *Dict) (Value, error) {
	switch f := fn.(type) {
	case *Func:
		if err := r.step(); err != nil {
			return nil, err
		}
		return f.call(r, args, kwargs)
	case *loopInfo:
		if !f.node.recursive {
			return nil, fmt.Errorf("the loop is not recursive: call loop(...) only in a 'for ... recursive' loop")
		}
		if len(args) != 1 {
			return nil, fmt.Errorf("loop() takes one argument")
		}
		r.calls++
		defer func() { r.calls-- }()
		if r.calls > maxCalls {
			return nil, fmt.Errorf("recursive loop nested more than %d deep", maxCalls)
		}
		saved := r.out
		r.out = &strings.Builder{}
		_, err := r.loop(f.node, args[0], f.scope, f.depth+1)
		s := r.out.String()
		r.out = saved
		return s, err
	case Undefined:
		return nil, f.err()
	}
	return nil, fmt.Errorf("'%s' object is not callable", typeName(fn))
}

// getAttr is Jinja's sandboxed obj.name: an attribute (a method) first,
// then an item.
func getAttr(obj Value, name string) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, o.err()
	case *Namespace:
		if v, ok := o.attrs.Get(name); ok {
			return v, nil
		}
	case *loopInfo:
		return o.attr(name)
	case *Dict:
		if m := method(obj, name); m != nil {
			return m, nil
		}
		if v, ok := o.Get(name); ok {
			return v, nil
		}
	default:
		if m := method(obj, name); m != nil {
			return m, nil
		}
	}
	return Undefined{fmt.Sprintf("'%s' has no attribute '%s'", objectRepr(obj), name)}, nil
}

// getItem is Jinja's sandboxed obj[key]: an item first, then an attribute.
func getItem(obj Value, key Value) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, o.err()
	case *Dict:
		if v, ok := o.Get(key); ok {
			return v, nil
		}
	case List, Tuple, string:
		if i, _, isFloat, ok := number(key); ok && !isFloat {
			var n int
			var at func(int) Value
			switch o := o.(type) {
			case List:
				n, at = len(o), func(i int) Value { return o[i] }
			case Tuple:
				n, at = len(o), func(i int) Value { return o[i] }
			case string:
				rs := []rune(o)
				n, at = len(rs), func(i int) Value { return string(rs[i]) }
			}
			if i < 0 {
				i += int64(n)
			}
			if i >= 0 && i < int64(n) {
				return at(int(i)), nil
			}
		}
	case *loopInfo:
		if s, ok := key.(string); ok {
			return o.attr(s)
		}
	case *Namespace:
		if s, ok := key.(string); ok {
			if v, ok := o.attrs.Get(s); ok {
				return v, nil
			}
		}
	}
	if s, ok := key.(string); ok {
		if m := method(obj, s); m != nil {
			return m, nil
		}
		return Undefined{fmt.Sprintf("'%s' has no attribute '%s'", objectRepr(obj), s)}, nil
	}
	return Undefined{fmt.Sprintf("%s has no element %s", objectRepr(obj), repr(key))}, nil
}

func (l *loopInfo) attr(name string) (Value, error) {
	n := len(l.items)
	i := l.index
	switch name {
	case "index":
		return int64(i + 1), nil
	case "index0":
		return int64(i), nil
	case "revindex":
		return int64(n - i), nil
	case "revindex0":
		return int64(n - i - 1), nil
	case "first":
		return i == 0, nil
	case "last":
		return i == n-1, nil
	case "length":
		return int64(n), nil
	case "depth":
		return int64(l.depth), nil
	case "depth0":
		return int64(l.depth - 1), nil
	case "previtem":
		if i == 0 {
			return Undefined{"there is no previous item"}, nil
		}
		return l.items[i-1], nil
	case "nextitem":
		if i == n-1 {
			return Undefined{"there is no next item"}, nil
		}
		return l.items[i+1], nil
	case "cycle":
		return &Func{name: "loop.cycle", call: func(_ *renderer, args []Value, _ *Dict) (Value, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("no items for cycling given")
			}
			return args[i%len(args)], nil
		}}, nil
	case "changed":
		return &Func{name: "loop.changed", call: func(_ *renderer, args []Value, _ *Dict) (Value, error) {
			v := Value(Tuple(args))
			if l.seen && equal(v, l.changed) {
				return false, nil
			}
			l.seen, l.changed = true, v
			return true, nil
		}}, nil
	}
	return Undefined{fmt.Sprintf("'LoopContext object' has no attribute '%s'", name)}, nil
}

// slice is obj[start:stop:step] on a list, tuple or string.
func (r *renderer) slice(obj Value, s *sliceExpr, sc *scope) (Value, error) {
	if u, ok := obj.(Undefined); ok {
		return nil, u.err()
	}
	var bounds [3]*int64
	for i, x := range []expr{s.start, s.stop, s.step} {
		if x == nil {
			continue
		}
		v, err := r.eval(x, sc)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, _, isFloat, ok := number(v)
		if !ok || isFloat {
			return nil, fmt.Errorf("slice indices must be integers or None")
		}
		bounds[i] = &n
	}
	var n int
	var rs []rune
	switch o := obj.(type) {
	case List:
		n = len(o)
	case Tuple:
		n = len(o)
	case string:
		rs = []rune(o)
		n = len(rs)
	default:
		return Undefined{fmt.Sprintf("'%s' is not subscriptable", objectRepr(obj))}, nil
	}
	idx, err := sliceIndices(n, bounds)
	if err != nil {
		return nil, err
	}
	switch o := obj.(type) {
	case List:
		out := make(List, len(idx))
		for i, j := range idx {
			out[i] = o[j]
		}
		return out, nil
	case Tuple:
		out := make(Tuple, len(idx))
		for i, j := range idx {
			out[i] = o[j]
		}
		return out, nil
	}
	out := make([]rune, len(idx))
	for i, j := range idx {
		out[i] = rs[j]
	}
	return string(out), nil
}

// sliceIndices lists the indices a Python slice of a length-n sequence picks.
func sliceIndices(n int, b [3]*int64) ([]int, error) {
	step := int64(1)
	if b[2] != nil {
		step = *b[2]
	}
	if step == 0 {
		return nil, fmt.Errorf("slice step cannot be zero")
	}
	ln := int64(n)
	adjust := func(p *int64, def int64, lo, hi int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += ln
			if v < lo {
				v = lo
			}
		} else if v > hi {
			v = hi
		}
		return v
	}
	var start, stop int64
	if step > 0 {
		start = adjust(b[0], 0, 0, ln)
		stop = adjust(b[1], ln, 0, ln)
	} else {
		start = adjust(b[0], ln-1, -1, ln-1)
		stop = adjust(b[1], -1, -1, ln-1)
	}
	var out []int
	for i := start; step > 0 && i < stop || step < 0 && i > stop; i += step {
		out = append(out, int(i))
	}
	return out, nil
}

func unary(op string, v Value) (Value, error) {
	if op == "not" {
		return !truth(v), nil
	}
	if u, ok := v.(Undefined); ok {
		return nil, u.err()
	}
	i, f, isFloat, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("bad operand type for unary %s: '%s'", op, typeName(v))
	}
	if op == "+" {
		if isFloat {
			return f, nil
		}
		return i, nil
	}
	if isFloat {
		return -f, nil
	}
	if i == math.MinInt64 {
		return nil, fmt.Errorf("integer overflow")
	}
	return -i, nil
}

func compare(op string, l, r Value) (bool, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "<":
		return less(l, r)
	case ">":
		return less(r, l)
	case "<=":
		lt, err := less(l, r)
		return lt || err == nil && equal(l, r), err
	case ">=":
		gt, err := less(r, l)
		return gt || err == nil && equal(l, r), err
	case "in":
		return contains(r, l)
	case "notin":
		ok, err := contains(r, l)
		return !ok, err
	}
	return false, fmt.Errorf("unknown comparison %s", op)
}

// contains is Python's x in container.
func contains(container, x Value) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := x.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(x))
		}
		return strings.Contains(c, s), nil
	case List:
		for _, v := range c {
			if equal(v, x) {
				return true, nil
			}
		}
		return false, nil
	case Tuple:
		for _, v := range c {
			if equal(v, x) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		_, ok := c.Get(x)
		return ok, nil
	case Undefined:
		return false, nil
	case *Namespace:
		_, ok := c.attrs.Get(x)
		return ok, nil
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
}

func binary(op string, l, r Value) (Value, error) {
	if u, ok := l.(Undefined); ok {
		return nil, u.err()
	}
	if u, ok := r.(Undefined); ok {
		return nil, u.err()
	}
	li, lf, lFloat, lok := number(l)
	ri, rf, rFloat, rok := number(r)
	if lok && rok {
		return arith(op, li, lf, lFloat, ri, rf, rFloat)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := r.(string); ok {
				if len(a)+len(b) > maxStrBytes {
					return nil, fmt.Errorf("string longer than %d bytes", maxStrBytes)
				}
				return a + b, nil
			}
			return nil, fmt.Errorf("can only concatenate str (not \"%s\") to str", typeName(r))
		case List:
			if b, ok := r.(List); ok {
				return append(append(List{}, a...), b...), nil
			}
			return nil, fmt.Errorf("can only concatenate list (not \"%s\") to list", typeName(r))
		case Tuple:
			if b, ok := r.(Tuple); ok {
				return append(append(Tuple{}, a...), b...), nil
			}
			return nil, fmt.Errorf("can only concatenate tuple (not \"%s\") to tuple", typeName(r))
		}
	case "*":
		seq, n := l, ri
		if lok && !lFloat {
			seq, n = r, li
		} else if !rok || rFloat {
			break
		}
		if n < 0 {
			n = 0
		}
		switch s := seq.(type) {
		case string:
			if int64(len(s))*n > maxStrBytes {
				return nil, fmt.Errorf("string longer than %d bytes", maxStrBytes)
			}
			return strings.Repeat(s, int(n)), nil
		case List:
			if int64(len(s))*n > maxRange*10 {
				return nil, fmt.Errorf("list too long")
			}
			out := List{}
			for range n {
				out = append(out, s...)
			}
			return out, nil
		}
	case "%":
		if s, ok := l.(string); ok {
			return printf(s, r)
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

func arith(op string, li int64, lf float64, lFloat bool, ri int64, rf float64, rFloat bool) (Value, error) {
	isFloat := lFloat || rFloat
	switch op {
	case "+", "-", "*":
		if !isFloat {
			var v int64
			var overflow bool
			switch op {
			case "+":
				v = li + ri
				overflow = (li > 0 && ri > 0 && v < 0) || (li < 0 && ri < 0 && v >= 0)
			case "-":
				v = li - ri
				overflow = (li >= 0 && ri < 0 && v < 0) || (li < 0 && ri > 0 && v >= 0)
			case "*":
				var ok bool
				v, ok = mul64(li, ri)
				overflow = !ok
			}
			if overflow {
				return nil, fmt.Errorf("integer overflow")
			}
			return v, nil
		}
		switch op {
		case "+":
			return lf + rf, nil
		case "-":
			return lf - rf, nil
		}
		return lf * rf, nil
	case "/":
		if rf == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		return lf / rf, nil
	case "//", "%":
		if rf == 0 {
			if op == "%" {
				return nil, fmt.Errorf("modulo by zero")
			}
			return nil, fmt.Errorf("integer division or modulo by zero")
		}
		if !isFloat {
			q, m := li/ri, li%ri
			if m != 0 && (m < 0) != (ri < 0) {
				q--
				m += ri
			}
			if op == "//" {
				return q, nil
			}
			return m, nil
		}
		m := math.Mod(lf, rf)
		if m != 0 && (m < 0) != (rf < 0) {
			m += rf
		}
		if op == "//" {
			return math.Floor((lf - m) / rf), nil
		}
		return m, nil
	case "**":
		if !isFloat && ri >= 0 {
			v, ok := ipow(li, ri)
			if !ok {
				return nil, fmt.Errorf("integer overflow")
			}
			return v, nil
		}
		return math.Pow(lf, rf), nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

// mul64 multiplies with an overflow check.
func mul64(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	v := a * b
	if v/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, false
	}
	return v, true
}

// ipow is b**e for e >= 0, by squaring; ok is false on overflow.
func ipow(b, e int64) (int64, bool) {
	v := int64(1)
	for ok := true; e > 0; e >>= 1 {
		if e&1 == 1 {
			if v, ok = mul64(v, b); !ok {
				return 0, false
			}
		}
		if e > 1 {
			if b, ok = mul64(b, b); !ok {
				return 0, false
			}
		}
	}
	return v, true
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
