package tdindex

import (
	"strconv"
	"strings"

	"github.com/theory/jsonpath"
	"github.com/theory/jsonpath/spec"
)

// need is what a per-TD JSONPath query requires of a TD before it can select
// anything from it: every clause must have at least one of its strings
// among the TD's member names or string values. A nil need requires
// nothing. Deriving it errs towards requiring less: a TD that fails it
// certainly yields no result, a TD that passes is parsed and queried.
type need [][]string

// Prefilter tells, from a Summary alone, whether a JSONPath query may
// select anything from a TD: a TD it rejects certainly yields nothing. The
// zero Prefilter passes every TD.
type Prefilter struct {
	// clauses are the query's need, each string hashed once for all TDs.
	clauses [][]bloomKey
}

// NewPrefilter derives the Prefilter of p for a caller that evaluates p
// over the array of TDs part by part (p's first segment selects elements
// one by one and no filter in p refers to the root) and over the documents
// as summarised, not enriched with strings their summaries do not hold.
// Only what a filter on the first segment needs is required; any other
// query gets the zero Prefilter.
func NewPrefilter(p *jsonpath.Path) Prefilter {
	return requiredStrings(p).prefilter()
}

func (n need) prefilter() Prefilter {
	var f Prefilter
	for _, clause := range n {
		keys := make([]bloomKey, 0, len(clause))
		for _, s := range clause {
			keys = append(keys, keyOf(s))
		}
		f.clauses = append(f.clauses, keys)
	}
	return f
}

// IsZero reports whether f passes every TD (the query requires nothing
// the Bloom filter can tell).
func (f Prefilter) IsZero() bool { return len(f.clauses) == 0 }

// MayMatch reports whether the TD summarised by s passes f.
func (f Prefilter) MayMatch(s *Summary) bool {
	for _, clause := range f.clauses {
		ok := false
		for _, k := range clause {
			if s.mayHave(k) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// requiredStrings derives the need of p, whose first segment is a single
// filter or wildcard selector over the array of TDs and which never refers
// to the root inside (see splittable).
func requiredStrings(p *jsonpath.Path) need {
	segs := p.Query().Segments()
	if len(segs) == 0 || len(segs[0].Selectors()) != 1 {
		return nil
	}
	f, ok := segs[0].Selectors()[0].(*spec.FilterSelector)
	if !ok {
		return nil
	}
	return orNeed(f.LogicalOr)
}

// orNeed: a TD passing any branch passes; so all branches must require
// something, and then one of their first clauses must hold.
func orNeed(or spec.LogicalOr) need {
	if len(or) == 1 {
		return andNeed(or[0])
	}
	var clause []string
	for _, and := range or {
		n := andNeed(and)
		if len(n) == 0 {
			return nil
		}
		clause = append(clause, n[0]...)
	}
	return need{clause}
}

func andNeed(and spec.LogicalAnd) need {
	var n need
	for _, e := range and {
		n = append(n, exprNeed(e)...)
	}
	return n
}

func exprNeed(e spec.BasicExpr) need {
	switch e := e.(type) {
	case *spec.ParenExpr:
		return orNeed(e.LogicalOr)
	case *spec.ExistExpr:
		return queryNeed(e.PathQuery)
	case *spec.CompExpr:
		if lit, ok := equalsStringLiteral(e); ok {
			return need{{lit}}
		}
	}
	// Negations, other comparisons and functions require nothing we can
	// state as present strings.
	return nil
}

// queryNeed is the need of a relative query that selects at least one node
// of the TD: each single name it steps through is a member name of the TD,
// and each single filter it steps through held for some node of the TD.
func queryNeed(q *spec.PathQuery) need {
	if !strings.HasPrefix(q.String(), "@") {
		return nil
	}
	var n need
	for _, seg := range q.Segments() {
		sels := seg.Selectors()
		if len(sels) != 1 {
			continue // a union selects if any part does
		}
		switch s := sels[0].(type) {
		case spec.Name:
			n = append(n, []string{string(s)})
		case *spec.FilterSelector:
			n = append(n, orNeed(s.LogicalOr)...)
		}
	}
	return n
}

// equalsStringLiteral recognises `@… == "lit"` and `"lit" == @…`: true only
// when the TD holds lit as a string value. spec keeps a comparison's parts
// private, so this reads its canonical text, in which names are written
// with strconv.Quote and string literals with %#v; a text that splits more
// than one way is not trusted.
func equalsStringLiteral(ce *spec.CompExpr) (string, bool) {
	s := ce.String()
	const op = " == "
	found, lit := 0, ""
	for i := strings.Index(s, op); i >= 0; {
		left, right := s[:i], s[i+len(op):]
		if v, err := strconv.Unquote(right); err == nil && strings.HasPrefix(left, "@") && strings.HasPrefix(right, `"`) {
			found, lit = found+1, v
		} else if v, err := strconv.Unquote(left); err == nil && strings.HasPrefix(right, "@") && strings.HasPrefix(left, `"`) {
			found, lit = found+1, v
		}
		next := strings.Index(s[i+1:], op)
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return lit, found == 1
}
