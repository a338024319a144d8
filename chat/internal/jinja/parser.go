package jinja

import (
	"fmt"
	"strconv"
)

// node is a statement of a template body.
type node interface{ nodeLine() int }

// expr is an expression.
type expr interface{ exprLine() int }

type pos struct{ line int }

func (p pos) nodeLine() int { return p.line }
func (p pos) exprLine() int { return p.line }

// Statements.
type (
	textNode struct {
		pos
		text string
	}
	outputNode struct {
		pos
		x expr
	}
	ifNode struct {
		pos
		conds  []expr
		bodies [][]node
		orElse []node
	}
	forNode struct {
		pos
		target    expr // nameExpr or tupleExpr of names
		iter      expr
		cond      expr // the loop filter, or nil
		body      []node
		orElse    []node
		recursive bool
	}
	setNode struct {
		pos
		target expr // nameExpr, tupleExpr or attrExpr (namespace)
		x      expr
	}
	setBlockNode struct {
		pos
		target  expr
		filters []*filterExpr // applied to the body, innermost first
		body    []node
	}
	macroNode struct {
		pos
		name     string
		params   []string
		defaults []expr // aligned to the end of params
		body     []node
	}
	callBlockNode struct {
		pos
		params   []string
		defaults []expr
		call     *callExpr
		body     []node
	}
	filterBlockNode struct {
		pos
		filters []*filterExpr
		body    []node
	}
	withNode struct {
		pos
		targets []expr
		values  []expr
		body    []node
	}
	breakNode    struct{ pos }
	continueNode struct{ pos }
	// scopeNode is a body rendered as it is: {% generation %}.
	scopeNode struct {
		pos
		body []node
	}
)

// Expressions.
type (
	constExpr struct {
		pos
		v Value
	}
	nameExpr struct {
		pos
		name string
	}
	attrExpr struct {
		pos
		x    expr
		name string
	}
	itemExpr struct {
		pos
		x, key expr
	}
	sliceExpr struct {
		pos
		start, stop, step expr // nil when left out
	}
	callExpr struct {
		pos
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	filterExpr struct {
		pos
		x      expr // nil inside a filter block
		name   string
		args   []expr
		kwargs []kwarg
	}
	testExpr struct {
		pos
		x      expr
		name   string
		args   []expr
		kwargs []kwarg
		negate bool
	}
	binExpr struct {
		pos
		op   string
		l, r expr
	}
	unaryExpr struct {
		pos
		op string // "not", "-", "+"
		x  expr
	}
	compareExpr struct {
		pos
		first expr
		ops   []string
		rest  []expr
	}
	concatExpr struct {
		pos
		parts []expr
	}
	condExpr struct {
		pos
		test, then, orElse expr // orElse may be nil
	}
	listExpr struct {
		pos
		items []expr
	}
	tupleExpr struct {
		pos
		items []expr
	}
	dictExpr struct {
		pos
		keys, vals []expr
	}
)

type kwarg struct {
	name string
	x    expr
}

// maxDepth bounds the nesting of expressions and blocks, so no template
// can exhaust the stack.
const maxDepth = 200

type parser struct {
	toks  []token
	i     int
	depth int
}

// parse parses a template into its body.
func parse(src string) ([]node, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	body, end, err := p.body()
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errAt(p.cur().line, "unexpected '%s'", end)
	}
	return body, nil
}

func (p *parser) cur() token  { return p.toks[p.i] }
func (p *parser) peek() token { return p.toks[min(p.i+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

func (p *parser) errAt(line int, format string, args ...any) error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tokOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tokName && t.val == name
}

func (p *parser) expectOp(op string) error {
	if !p.isOp(op) {
		return p.errAt(p.cur().line, "expected '%s', got %s", op, p.cur())
	}
	p.next()
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tokName {
		return "", p.errAt(t.line, "expected a name, got %s", t)
	}
	p.next()
	return t.val, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tokBlockEnd {
		return p.errAt(p.cur().line, "expected end of statement block, got %s", p.cur())
	}
	p.next()
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxDepth {
		return p.errAt(p.cur().line, "template nested more than %d levels deep", maxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// body parses nodes up to a block tag it does not know (an end tag, elif
// or else), whose name it returns with the parser on that name, or to the
// end of the template ("").
func (p *parser) body() ([]node, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer p.leave()
	var out []node
	for {
		t := p.cur()
		switch t.kind {
		case tokEOF:
			return out, "", nil
		case tokData:
			p.next()
			out = append(out, &textNode{pos{t.line}, t.val})
		case tokVarBegin:
			p.next()
			x, err := p.tuple(true, true)
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tokVarEnd {
				return nil, "", p.errAt(p.cur().line, "expected end of print statement, got %s", p.cur())
			}
			p.next()
			out = append(out, &outputNode{pos{t.line}, x})
		case tokBlockBegin:
			p.next()
			name := p.cur()
			if name.kind != tokName {
				return nil, "", p.errAt(name.line, "tag name expected, got %s", name)
			}
			n, err := p.statement()
			if err != nil {
				return nil, "", err
			}
			if n == nil {
				return out, name.val, nil
			}
			out = append(out, n)
		default:
			return nil, "", p.errAt(t.line, "unexpected %s", t)
		}
	}
}

// subBody parses a body that must end with one of ends, and consumes the
// end tag's name; it returns which end it was.
func (p *parser) subBody(tag string, line int, ends ...string) ([]node, string, error) {
	body, end, err := p.body()
	if err != nil {
		return nil, "", err
	}
	for _, e := range ends {
		if end == e {
			p.next()
			return body, end, nil
		}
	}
	if end == "" {
		return nil, "", p.errAt(p.cur().line, "unexpected end of template: the '%s' tag on line %d was never closed (expected '%s')", tag, line, ends[len(ends)-1])
	}
	return nil, "", p.errAt(p.cur().line, "unexpected '%s' in the '%s' block of line %d (expected '%s')", end, tag, line, ends[len(ends)-1])
}

// statement parses the block tag whose name is the current token. It
// returns nil (and does not consume the name) for end tags, elif and else.
func (p *parser) statement() (node, error) {
	t := p.cur()
	at := pos{t.line}
	switch t.val {
	case "if":
		p.next()
		n := &ifNode{pos: at}
		for {
			cond, err := p.tuple(false, false)
			if err != nil {
				return nil, err
			}
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			body, end, err := p.subBody("if", t.line, "elif", "else", "endif")
			if err != nil {
				return nil, err
			}
			n.conds = append(n.conds, cond)
			n.bodies = append(n.bodies, body)
			switch end {
			case "elif":
				continue
			case "else":
				if err := p.expectBlockEnd(); err != nil {
					return nil, err
				}
				n.orElse, _, err = p.subBody("if", t.line, "endif")
				if err != nil {
					return nil, err
				}
			}
			return n, p.expectBlockEnd()
		}
	case "for":
		p.next()
		n := &forNode{pos: at}
		var err error
		if n.target, err = p.assignTarget(false); err != nil {
			return nil, err
		}
		if !p.isName("in") {
			return nil, p.errAt(p.cur().line, "expected 'in', got %s", p.cur())
		}
		p.next()
		if n.iter, err = p.tuple(false, false); err != nil {
			return nil, err
		}
		if p.isName("if") {
			p.next()
			if n.cond, err = p.expression(true); err != nil {
				return nil, err
			}
		}
		if p.isName("recursive") {
			p.next()
			n.recursive = true
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.subBody("for", t.line, "else", "endfor")
		if err != nil {
			return nil, err
		}
		n.body = body
		if end == "else" {
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			if n.orElse, _, err = p.subBody("for", t.line, "endfor"); err != nil {
				return nil, err
			}
		}
		return n, p.expectBlockEnd()
	case "set":
		p.next()
		target, err := p.assignTarget(true)
		if err != nil {
			return nil, err
		}
		if p.isOp("=") {
			p.next()
			x, err := p.tuple(true, false)
			if err != nil {
				return nil, err
			}
			return &setNode{at, target, x}, p.expectBlockEnd()
		}
		n := &setBlockNode{pos: at, target: target}
		if n.filters, err = p.filterChain(); err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.body, _, err = p.subBody("set", t.line, "endset"); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	case "macro":
		p.next()
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		n := &macroNode{pos: at, name: name}
		if n.params, n.defaults, err = p.signature(); err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.body, _, err = p.subBody("macro", t.line, "endmacro"); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	case "call":
		p.next()
		n := &callBlockNode{pos: at}
		var err error
		if p.isOp("(") {
			if n.params, n.defaults, err = p.signature(); err != nil {
				return nil, err
			}
		}
		x, err := p.expression(true)
		if err != nil {
			return nil, err
		}
		call, ok := x.(*callExpr)
		if !ok {
			return nil, p.errAt(t.line, "expected a call after 'call'")
		}
		n.call = call
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.body, _, err = p.subBody("call", t.line, "endcall"); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	case "filter":
		p.next()
		n := &filterBlockNode{pos: at}
		first, err := p.filter(nil)
		if err != nil {
			return nil, err
		}
		rest, err := p.filterChain()
		if err != nil {
			return nil, err
		}
		n.filters = append([]*filterExpr{first}, rest...)
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.body, _, err = p.subBody("filter", t.line, "endfilter"); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	case "with":
		p.next()
		n := &withNode{pos: at}
		for p.cur().kind != tokBlockEnd {
			if len(n.targets) > 0 {
				if err := p.expectOp(","); err != nil {
					return nil, err
				}
			}
			target, err := p.assignTarget(false)
			if err != nil {
				return nil, err
			}
			if err := p.expectOp("="); err != nil {
				return nil, err
			}
			v, err := p.expression(true)
			if err != nil {
				return nil, err
			}
			n.targets = append(n.targets, target)
			n.values = append(n.values, v)
		}
		p.next()
		var err error
		if n.body, _, err = p.subBody("with", t.line, "endwith"); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	case "generation":
		p.next()
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.subBody("generation", t.line, "endgeneration")
		if err != nil {
			return nil, err
		}
		return &scopeNode{at, body}, p.expectBlockEnd()
	case "break", "continue":
		p.next()
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if t.val == "break" {
			return &breakNode{at}, nil
		}
		return &continueNode{at}, nil
	case "elif", "else", "endif", "endfor", "endset", "endmacro", "endcall", "endfilter", "endwith", "endgeneration":
		return nil, nil
	case "include", "import", "from", "extends", "block", "do", "autoescape":
		return nil, p.errAt(t.line, "the '%s' tag is not available to chat templates", t.val)
	}
	return nil, p.errAt(t.line, "unknown tag '%s'", t.val)
}

// signature parses a macro's "(a, b=1)".
func (p *parser) signature() ([]string, []expr, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var params []string
	var defaults []expr
	for !p.isOp(")") {
		if len(params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		name, err := p.expectName()
		if err != nil {
			return nil, nil, err
		}
		params = append(params, name)
		if p.isOp("=") {
			p.next()
			d, err := p.expression(true)
			if err != nil {
				return nil, nil, err
			}
			defaults = append(defaults, d)
		} else if len(defaults) > 0 {
			return nil, nil, p.errAt(p.cur().line, "non-default argument follows default argument")
		}
	}
	p.next()
	return params, defaults, nil
}

// assignTarget parses the target of a for, set or with: a name, names
// separated by commas, or (for set) a namespace attribute.
func (p *parser) assignTarget(allowAttr bool) (expr, error) {
	line := p.cur().line
	paren := p.isOp("(")
	if paren {
		p.next()
	}
	var items []expr
	tuple := false
	for {
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		var x expr = &nameExpr{pos{line}, name}
		if allowAttr && !paren && len(items) == 0 && p.isOp(".") {
			p.next()
			attr, err := p.expectName()
			if err != nil {
				return nil, err
			}
			return &attrExpr{pos{line}, x, attr}, nil
		}
		items = append(items, x)
		if !p.isOp(",") {
			break
		}
		p.next()
		tuple = true
		if p.cur().kind != tokName || p.isName("in") {
			break
		}
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return nil, err
		}
	}
	if !tuple && !paren {
		return items[0], nil
	}
	return &tupleExpr{pos{line}, items}, nil
}

// filterChain parses "|f|g(x)" after a block set's target.
func (p *parser) filterChain() ([]*filterExpr, error) {
	var out []*filterExpr
	for p.isOp("|") {
		p.next()
		f, err := p.filter(nil)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// tuple parses an expression, or a tuple of them separated by commas.
func (p *parser) tuple(withCond, allowEmpty bool) (expr, error) {
	line := p.cur().line
	var items []expr
	trailingComma := false
	for {
		if len(items) > 0 {
			if !p.isOp(",") {
				break
			}
			p.next()
			trailingComma = true
		}
		if p.tupleEnds() {
			break
		}
		x, err := p.expression(withCond)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
		trailingComma = false
	}
	if len(items) == 1 && !trailingComma {
		return items[0], nil
	}
	if len(items) == 0 && !allowEmpty {
		return nil, p.errAt(line, "expected an expression, got %s", p.cur())
	}
	return &tupleExpr{pos{line}, items}, nil
}

func (p *parser) tupleEnds() bool {
	t := p.cur()
	switch t.kind {
	case tokVarEnd, tokBlockEnd, tokEOF:
		return true
	case tokOp:
		return t.val == ")" || t.val == "]" || t.val == "}" || t.val == "="
	case tokName:
		return t.val == "in" || t.val == "if" || t.val == "recursive"
	}
	return false
}

func (p *parser) expression(withCond bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if !withCond {
		return p.or()
	}
	line := p.cur().line
	x, err := p.or()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		p.next()
		test, err := p.or()
		if err != nil {
			return nil, err
		}
		var orElse expr
		if p.isName("else") {
			p.next()
			if orElse, err = p.expression(true); err != nil {
				return nil, err
			}
		}
		x = &condExpr{pos{line}, test, x, orElse}
	}
	return x, nil
}

func (p *parser) or() (expr, error) { return p.binary(p.and, "or") }

func (p *parser) and() (expr, error) { return p.binary(p.not, "and") }

func (p *parser) not() (expr, error) {
	if p.isName("not") {
		line := p.next().line
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.not()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{pos{line}, "not", x}, nil
	}
	return p.compare()
}

func (p *parser) compare() (expr, error) {
	line := p.cur().line
	x, err := p.math1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{pos: pos{line}, first: x}
	for {
		var op string
		switch {
		case p.cur().kind == tokOp && (p.cur().val == "==" || p.cur().val == "!=" || p.cur().val == "<" || p.cur().val == ">" || p.cur().val == "<=" || p.cur().val == ">="):
			op = p.next().val
		case p.isName("in"):
			p.next()
			op = "in"
		case p.isName("not") && p.peek().kind == tokName && p.peek().val == "in":
			p.next()
			p.next()
			op = "notin"
		default:
			if len(c.ops) == 0 {
				return x, nil
			}
			return c, nil
		}
		r, err := p.math1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
}

// binary parses a left-associative chain of next's operands joined by any
// of ops: operator tokens, or the keywords "and" and "or".
func (p *parser) binary(next func() (expr, error), ops ...string) (expr, error) {
	x, err := next()
	if err != nil {
		return nil, err
	}
	for {
		t := p.cur()
		found := false
		for _, op := range ops {
			if (t.kind == tokOp || t.kind == tokName) && t.val == op {
				found = true
			}
		}
		if !found {
			return x, nil
		}
		p.next()
		r, err := next()
		if err != nil {
			return nil, err
		}
		x = &binExpr{pos{t.line}, t.val, x, r}
	}
}

func (p *parser) math1() (expr, error) { return p.binary(p.concat, "+", "-") }

func (p *parser) concat() (expr, error) {
	line := p.cur().line
	x, err := p.math2()
	if err != nil || !p.isOp("~") {
		return x, err
	}
	parts := []expr{x}
	for p.isOp("~") {
		p.next()
		r, err := p.math2()
		if err != nil {
			return nil, err
		}
		parts = append(parts, r)
	}
	return &concatExpr{pos{line}, parts}, nil
}

func (p *parser) math2() (expr, error) { return p.binary(p.pow, "*", "/", "//", "%") }

func (p *parser) pow() (expr, error) {
	return p.binary(func() (expr, error) { return p.unary(true) }, "**")
}

func (p *parser) unary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.cur()
	var x expr
	var err error
	if t.kind == tokOp && (t.val == "-" || t.val == "+") {
		p.next()
		inner, err := p.unary(false)
		if err != nil {
			return nil, err
		}
		x = &unaryExpr{pos{t.line}, t.val, inner}
	} else {
		if x, err = p.primary(); err != nil {
			return nil, err
		}
	}
	if x, err = p.postfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.filterExpr(x)
	}
	return x, nil
}

func (p *parser) primary() (expr, error) {
	t := p.cur()
	at := pos{t.line}
	switch t.kind {
	case tokName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{at, true}, nil
		case "false", "False":
			return &constExpr{at, false}, nil
		case "none", "None":
			return &constExpr{at, nil}, nil
		}
		return &nameExpr{at, t.val}, nil
	case tokString:
		p.next()
		s := t.val
		for p.cur().kind == tokString {
			s += p.next().val
		}
		return &constExpr{at, s}, nil
	case tokInt:
		p.next()
		v, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			return nil, p.errAt(t.line, "integer %s out of range", t.val)
		}
		return &constExpr{at, v}, nil
	case tokFloat:
		p.next()
		v, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, p.errAt(t.line, "bad float %s", t.val)
		}
		return &constExpr{at, v}, nil
	case tokOp:
		switch t.val {
		case "(":
			p.next()
			x, err := p.tuple(true, true)
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			p.next()
			l := &listExpr{pos: at}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				x, err := p.expression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			p.next()
			return l, nil
		case "{":
			p.next()
			d := &dictExpr{pos: at}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.expression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.expression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.next()
			return d, nil
		}
	}
	return nil, p.errAt(t.line, "unexpected %s", t)
}

func (p *parser) postfix(x expr) (expr, error) {
	for {
		t := p.cur()
		if t.kind != tokOp {
			return x, nil
		}
		switch t.val {
		case ".":
			p.next()
			n := p.cur()
			switch n.kind {
			case tokName:
				p.next()
				x = &attrExpr{pos{t.line}, x, n.val}
			case tokInt:
				p.next()
				v, _ := strconv.ParseInt(n.val, 10, 64)
				x = &itemExpr{pos{t.line}, x, &constExpr{pos{t.line}, v}}
			default:
				return nil, p.errAt(n.line, "expected a name after '.', got %s", n)
			}
		case "[":
			p.next()
			var keys []expr
			for !p.isOp("]") {
				if len(keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
				}
				k, err := p.subscript()
				if err != nil {
					return nil, err
				}
				keys = append(keys, k)
			}
			p.next()
			if len(keys) == 0 {
				return nil, p.errAt(t.line, "expected a subscript")
			}
			var key expr = keys[0]
			if len(keys) > 1 {
				key = &tupleExpr{pos{t.line}, keys}
			}
			x = &itemExpr{pos{t.line}, x, key}
		case "(":
			call, err := p.call(x)
			if err != nil {
				return nil, err
			}
			x = call
		default:
			return x, nil
		}
	}
}

// subscript parses an index or a slice "a:b:c" inside brackets.
func (p *parser) subscript() (expr, error) {
	line := p.cur().line
	var parts [3]expr
	n := 0
	for {
		if !p.isOp(":") && !p.isOp("]") && !p.isOp(",") {
			x, err := p.expression(true)
			if err != nil {
				return nil, err
			}
			parts[n] = x
		}
		if !p.isOp(":") || n == 2 {
			break
		}
		p.next()
		n++
	}
	if n == 0 {
		if parts[0] == nil {
			return nil, p.errAt(line, "expected a subscript")
		}
		return parts[0], nil
	}
	return &sliceExpr{pos{line}, parts[0], parts[1], parts[2]}, nil
}

// args parses call arguments after the "(".
func (p *parser) args() ([]expr, []kwarg, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []expr
	var kwargs []kwarg
	for !p.isOp(")") {
		if len(args)+len(kwargs) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			return nil, nil, p.errAt(p.cur().line, "*args and **kwargs in calls are not supported")
		}
		if p.cur().kind == tokName && p.peek().kind == tokOp && p.peek().val == "=" {
			name := p.next().val
			p.next()
			x, err := p.expression(true)
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwarg{name, x})
			continue
		}
		if len(kwargs) > 0 {
			return nil, nil, p.errAt(p.cur().line, "positional argument follows keyword argument")
		}
		x, err := p.expression(true)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, x)
	}
	p.next()
	return args, kwargs, nil
}

func (p *parser) call(fn expr) (*callExpr, error) {
	line := p.cur().line
	args, kwargs, err := p.args()
	if err != nil {
		return nil, err
	}
	return &callExpr{pos{line}, fn, args, kwargs}, nil
}

// dottedName parses a filter or test name, which may contain dots.
func (p *parser) dottedName() (string, error) {
	name, err := p.expectName()
	for err == nil && p.isOp(".") {
		p.next()
		var part string
		part, err = p.expectName()
		name += "." + part
	}
	return name, err
}

func (p *parser) filter(x expr) (*filterExpr, error) {
	line := p.cur().line
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	f := &filterExpr{pos: pos{line}, x: x, name: name}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.args(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// filterExpr parses the filters, tests and calls after a unary expression.
func (p *parser) filterExpr(x expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			p.next()
			f, err := p.filter(x)
			if err != nil {
				return nil, err
			}
			x = f
		case p.isName("is"):
			line := p.next().line
			t := &testExpr{pos: pos{line}, x: x}
			if p.isName("not") {
				p.next()
				t.negate = true
			}
			var err error
			if t.name, err = p.dottedName(); err != nil {
				return nil, err
			}
			c := p.cur()
			switch {
			case p.isOp("("):
				if t.args, t.kwargs, err = p.args(); err != nil {
					return nil, err
				}
			case (c.kind == tokName || c.kind == tokString || c.kind == tokInt || c.kind == tokFloat ||
				c.kind == tokOp && (c.val == "[" || c.val == "{")) &&
				!(c.kind == tokName && (c.val == "else" || c.val == "or" || c.val == "and")):
				if c.kind == tokName && c.val == "is" {
					return nil, p.errAt(c.line, "you cannot chain multiple tests with is")
				}
				arg, err := p.primary()
				if err != nil {
					return nil, err
				}
				if arg, err = p.postfix(arg); err != nil {
					return nil, err
				}
				t.args = []expr{arg}
			}
			x = t
		case p.isOp("("):
			call, err := p.call(x)
			if err != nil {
				return nil, err
			}
			x = call
		default:
			return x, nil
		}
	}
}
