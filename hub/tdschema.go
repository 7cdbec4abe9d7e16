package hub

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// tdSchemaJSON is the official W3C TD 1.1 JSON Schema ("version":
// "1.1-05-September-2022", $id .../wot-thing-description/main/validation/td-json-schema-validation.json),
// copied unchanged from the td-schema.json of the npm package
// @thing-description-playground/core 1.4.0 (WoT Discovery tdd-validation-jsonschema).
//
//go:embed schema/td-schema.json
var tdSchemaJSON []byte

// tdSchemaURL is the schema's own $id, so that its "#/definitions/…"
// references resolve inside the embedded copy and nothing is fetched.
const tdSchemaURL = "https://raw.githubusercontent.com/w3c/wot-thing-description/main/validation/td-json-schema-validation.json"

// tdSchema compiles the schema once, on first use; every door (HTTP, MQTT,
// WebSocket, mDNS) validates through Validate and so shares it.
var tdSchema = sync.OnceValue(func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(tdSchemaJSON))
	if err != nil {
		panic(fmt.Errorf("hub: embedded TD JSON Schema: %w", err))
	}
	c := jsonschema.NewCompiler()
	// draft-07 asserts format by default; say so explicitly, because
	// "created": "yesterday" must be refused (date-time).
	c.AssertFormat()
	if err := c.AddResource(tdSchemaURL, doc); err != nil {
		panic(fmt.Errorf("hub: embedded TD JSON Schema: %w", err))
	}
	s, err := c.Compile(tdSchemaURL)
	if err != nil {
		panic(fmt.Errorf("hub: compile the TD JSON Schema: %w", err))
	}
	return s
})

var schemaPrinter = message.NewPrinter(language.English)

// schemaErrors validates doc (decoded with UseNumber or not) against the TD
// 1.1 JSON Schema and returns one FieldError per failing member: Field is the
// instance location as a JSON pointer.
func schemaErrors(doc map[string]any) []FieldError {
	err := tdSchema().Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []FieldError{{Field: "", Description: "does not match the TD 1.1 JSON Schema"}}
	}
	var issues []schemaIssue
	collectSchemaErrors(ve, &issues)
	out := make([]FieldError, 0, len(issues))
	for _, i := range issues {
		if !slices.Contains(out, i.FieldError) {
			out = append(out, i.FieldError)
		}
	}
	return out
}

// schemaIssue is one leaf of the validator's error tree. valueKind marks an
// error about the value itself (type, enum, const, pattern): the errors that
// tell the branches of an anyOf/oneOf apart.
type schemaIssue struct {
	FieldError
	valueKind bool
	alts      []string // for a noneMatches issue: the branches' complaints
}

// collectSchemaErrors turns the validator's error tree into field errors.
// The TD schema is full of anyOf/oneOf (security schemes, link kinds, op,
// @context): all their branches fail at once, and listing every branch would
// tell a client that "scheme" must be "nosec" and "basic" and … at the same
// time. See pickBranches for how one answer is chosen.
func collectSchemaErrors(e *jsonschema.ValidationError, out *[]schemaIssue) {
	here := schemaPointer(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		if len(e.Causes) == 0 {
			// oneOf matched more than one branch.
			*out = append(*out, schemaIssue{FieldError: FieldError{Field: here, Description: e.ErrorKind.LocalizedString(schemaPrinter)}})
			return
		}
		branches := make([][]schemaIssue, len(e.Causes))
		for i, c := range e.Causes {
			collectSchemaErrors(c, &branches[i])
		}
		*out = append(*out, pickBranches(here, branches)...)
		return
	case *kind.Required:
		// A missing member is reported where it should be, as Validate's
		// own rules do ("/title": "is required").
		for _, m := range k.Missing {
			*out = append(*out, schemaIssue{FieldError: FieldError{Field: jsonx.PointerAppend(here, m), Description: "is required"}})
		}
		return
	case *kind.Const, *kind.Enum, *kind.Type, *kind.Pattern:
		*out = append(*out, schemaIssue{FieldError: FieldError{Field: here, Description: e.ErrorKind.LocalizedString(schemaPrinter)},
			valueKind: true})
		return
	}
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			collectSchemaErrors(c, out)
		}
		return
	}
	*out = append(*out, schemaIssue{FieldError: FieldError{Field: here, Description: e.ErrorKind.LocalizedString(schemaPrinter)}})
}

// pickBranches reports the failure of an anyOf/oneOf at here whose branches
// failed with the given issues. The member whose value most branches refuse,
// but not all, is the discriminator ("scheme" among security schemes): the
// branches that accept it are the ones the document meant, and their errors
// are reported (a basic scheme with "in": "nowhere" is blamed on /in). If
// every branch refuses one member's value, that member is reported once with
// what each branch wanted. Otherwise what every branch finds wrong is
// reported, or, if they share nothing, one error at here.
func pickBranches(here string, branches [][]schemaIssue) []schemaIssue {
	n := len(branches)
	counts := map[string]int{}
	for _, b := range branches {
		seen := map[string]bool{}
		for _, i := range b {
			if i.valueKind && !seen[i.Field] {
				seen[i.Field] = true
				counts[i.Field]++
			}
		}
	}
	refusesAt := func(b []schemaIssue, f string) bool {
		return slices.ContainsFunc(b, func(i schemaIssue) bool { return i.valueKind && i.Field == f })
	}
	disc, all := "", ""
	for f, c := range counts {
		switch {
		case c < n && (c > counts[disc] || c == counts[disc] && f < disc):
			disc = f
		case c == n && (all == "" || f < all):
			all = f
		}
	}
	if disc != "" {
		var kept [][]schemaIssue
		for _, b := range branches {
			if !refusesAt(b, disc) {
				kept = append(kept, b)
			}
		}
		if common := commonIssues(kept); len(common) > 0 {
			return common
		}
		var union []schemaIssue
		for _, b := range kept {
			union = append(union, b...)
		}
		return union
	}
	if all != "" {
		return []schemaIssue{noneMatches(all, branches, func(i schemaIssue) bool { return i.valueKind && i.Field == all })}
	}
	if common := commonIssues(branches); len(common) > 0 {
		return common
	}
	return []schemaIssue{noneMatches(here, branches, func(schemaIssue) bool { return true })}
}

// commonIssues returns the issues found in every one of branches.
func commonIssues(branches [][]schemaIssue) []schemaIssue {
	if len(branches) == 0 {
		return nil
	}
	return slices.DeleteFunc(slices.Clone(branches[0]), func(i schemaIssue) bool {
		for _, b := range branches[1:] {
			if !slices.ContainsFunc(b, func(j schemaIssue) bool { return j.FieldError == i.FieldError }) {
				return true
			}
		}
		return false
	})
}

// noneMatches is one error at field listing (up to ten of) the branches'
// distinct complaints selected by which.
func noneMatches(field string, branches [][]schemaIssue, which func(schemaIssue) bool) schemaIssue {
	var msgs []string
	for _, b := range branches {
		for _, i := range b {
			if !which(i) {
				continue
			}
			// A nested anyOf's complaints join this list, not its sentence.
			ms := i.alts
			if ms == nil {
				ms = []string{i.Description}
			}
			for _, m := range ms {
				if !slices.Contains(msgs, m) && len(msgs) < 10 {
					msgs = append(msgs, m)
				}
			}
		}
	}
	return schemaIssue{FieldError: FieldError{Field: field,
		Description: "matches none of the forms the TD 1.1 JSON Schema allows: " + strings.Join(msgs, "; ")},
		valueKind: true, alts: msgs}
}

func schemaPointer(loc []string) string {
	p := ""
	for _, t := range loc {
		p = jsonx.PointerAppend(p, t)
	}
	return p
}

// mergeSchemaErrors adds the schema's findings to the hub's own. Where a Go
// rule already reports a member (or a member inside or around it, except the
// document root), its message is kept and the schema's is dropped, so a
// client sees one description per problem.
func mergeSchemaErrors(own, schema []FieldError) []FieldError {
	covered := func(p string) bool {
		for _, f := range own {
			if p == f.Field || strings.HasPrefix(p, f.Field+"/") || (p != "" && strings.HasPrefix(f.Field, p+"/")) {
				return true
			}
		}
		return false
	}
	out := own
	for _, f := range schema {
		if !covered(f.Field) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}
