package mcpdoor

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The catalog is the door's view of the directory: every tool's name and
// what it stands for. sync makes it from the registry's summaries alone (a
// Thing's title and action names), so following the directory decodes no
// document and the door holds ~100 bytes per tool. What a client sees of a
// tool — its description and schemas, from the TD — is a spec, made when a
// listing, a search or a call needs it and kept in a bounded cache.

// spec is one tool as a client sees it: a Thing's action or a group's.
type spec struct {
	name   string
	thing  string // the Thing's id; "" for a group tool
	group  string // the group's id; "" for a Thing's tool
	action string
	title  string // the tool's title: the Thing's and the action's
	desc   string
	// in and out are the inputSchema and outputSchema (out nil: none),
	// as JSON, what the clients are sent.
	in, out json.RawMessage
	// noInput says the action takes no input (its tool takes {}).
	noInput bool
	// inWrapped and outWrapped say the action's input and output travel
	// wrapped in an object (schema.go); chat says the tool takes one
	// message for a conversation's input.
	inWrapped, outWrapped, chat bool
	readOnly                    bool // the action is safe (TD "safe")
	idempotent                  bool
	// actDesc is what the TD says of the action alone.
	actDesc string
	// check validates outputs against out (shared by the copies specOf
	// makes to name a spec).
	check *outChecker
}

// outChecker is an output schema compiled on first use.
type outChecker struct {
	once   sync.Once
	schema *jsonschema.Schema
	err    error
}

// thingSpecs are the specs of a Thing's actions, unnamed, made from one
// description (the cache's entry).
type thingSpecs struct {
	sum   *hub.Summary
	title string
	specs []*spec
}

func (ts *thingSpecs) action(name string) *spec {
	for _, s := range ts.specs {
		if s.action == name {
			return s
		}
	}
	return nil
}

// ref is what a tool's name stands for.
type ref struct {
	prefix               string // the name's first part (nameAll)
	thing, group, action string
}

// entry is a Thing as the catalog knows it: enough to name its tools.
type entry struct {
	sum     *hub.Summary
	title   string
	slug    string
	actions []string // sorted
}

func entryOf(t *hub.Thing) *entry {
	e := &entry{sum: t.Summary}
	if t.Summary != nil {
		e.title = t.Summary.Title
		e.actions = t.Summary.Affordances("actions")
	}
	e.slug = slug(e.title, true)
	return e
}

// catalog is one state of the tools: by name, and per Thing.
type catalog struct {
	byName  map[string]*ref
	names   []string // sorted
	things  map[string]*entry
	ofThing map[string][]string // Thing id → its tool names
}

// thingSpecsOf builds the specs of a Thing's actions from its description.
func thingSpecsOf(t hub.Thing, doc map[string]any) *thingSpecs {
	title, _ := doc["title"].(string)
	ts := &thingSpecs{sum: t.Summary, title: title}
	actions, _ := doc["actions"].(map[string]any)
	names := make([]string, 0, len(actions))
	for name := range actions {
		names = append(names, name)
	}
	sort.Strings(names)
	about := describeThing(t.ID, doc)
	for _, name := range names {
		aff, _ := actions[name].(map[string]any)
		if aff == nil {
			continue
		}
		s := actionSpec(name, aff, about)
		s.thing = t.ID
		s.title = joinTitle(title, affTitle(name, aff))
		ts.specs = append(ts.specs, s)
	}
	return ts
}

// actionSpec is the tool of one action affordance, about being what the
// tool's description says of the Thing.
func actionSpec(name string, aff map[string]any, about string) *spec {
	s := &spec{action: name}
	in, _ := aff["input"].(map[string]any)
	out, _ := aff["output"].(map[string]any)
	inSchema, wrapped := inputSchema(in)
	s.inWrapped, s.noInput = wrapped, in == nil
	if conversational(in) {
		inSchema, s.chat = messageSchema(), true
	}
	s.in = encode(inSchema)
	outSchema, wrapped := outputSchema(out)
	if outSchema != nil {
		s.out, s.outWrapped = encode(outSchema), wrapped
	}
	s.readOnly, _ = aff["safe"].(bool)
	s.idempotent, _ = aff["idempotent"].(bool)
	s.check = &outChecker{}
	if s.actDesc = affDescription(aff); s.actDesc == "" {
		s.actDesc = fmt.Sprintf("Invokes action %q.", name)
	}
	s.describe(about)
	return s
}

// describe sets the tool's description: the action's, then about.
func (s *spec) describe(about string) {
	d := s.actDesc
	if about != "" {
		d += "\n\n" + about
	}
	s.desc = clip(d, maxDescription)
}

// encode is v's JSON (the schemas decode from JSON: they encode).
func encode(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// maxDescription bounds a tool's description: clients send every
// description to the model with each request.
const maxDescription = 1500

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut-- // not inside a UTF-8 sequence
	}
	return s[:cut] + "…"
}

func affTitle(name string, aff map[string]any) string {
	if t, _ := aff["title"].(string); t != "" {
		return t
	}
	return name
}

func affDescription(aff map[string]any) string {
	d, _ := aff["description"].(string)
	if t, _ := aff["title"].(string); t != "" && d == "" {
		return t + "."
	}
	return d
}

func joinTitle(thing, action string) string {
	if thing == "" {
		return action
	}
	return thing + ": " + action
}

// describeThing says what a model needs to know of a Thing to pick it: its
// title, types, description and lmos:capabilities with their examples.
func describeThing(id string, doc map[string]any) string {
	var b strings.Builder
	title, _ := doc["title"].(string)
	fmt.Fprintf(&b, "Thing %q (%s)", title, id)
	if types := typesOf(doc); len(types) > 0 {
		fmt.Fprintf(&b, ", %s", strings.Join(types, ", "))
	}
	b.WriteString(".")
	if d, _ := doc["description"].(string); d != "" {
		b.WriteString(" ")
		b.WriteString(d)
	}
	caps, _ := doc["lmos:capabilities"].([]any)
	for i, c := range caps {
		if i == 0 {
			b.WriteString("\nCapabilities:")
		}
		m, _ := c.(map[string]any)
		name, _ := m["name"].(string)
		if name == "" {
			name, _ = m["id"].(string)
		}
		fmt.Fprintf(&b, "\n- %s", name)
		if d, _ := m["description"].(string); d != "" {
			fmt.Fprintf(&b, ": %s", d)
		}
		if ex, _ := m["examples"].([]any); len(ex) > 0 {
			var quoted []string
			for _, e := range ex {
				if s, ok := e.(string); ok {
					quoted = append(quoted, fmt.Sprintf("%q", s))
				}
			}
			if len(quoted) > 0 {
				fmt.Fprintf(&b, " (e.g. %s)", strings.Join(quoted, "; "))
			}
		}
	}
	return b.String()
}

func typesOf(doc map[string]any) []string {
	switch t := doc["@type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// groupSpec is the tool of group g's action, its input schema from the
// member m's (the first member, by id, that has the action).
func groupSpec(g *hub.Group, m *spec) *spec {
	title := g.Title
	if title == "" {
		title = g.ID
	}
	about := fmt.Sprintf("Group %q (%s): invokes the action on every member that has it, in parallel, and returns one result per member.", title, g.ID)
	if g.Description != "" {
		about += " " + g.Description
	}
	s := &spec{group: g.ID, action: m.action, in: m.in, inWrapped: m.inWrapped, noInput: m.noInput, chat: m.chat, actDesc: m.actDesc, check: &outChecker{}}
	s.title = joinTitle("Group "+title, m.action)
	// A group answers with every member's result, not one output.
	s.out = groupOutput
	s.describe(about)
	return s
}

// groupOutput is the outputSchema of every group tool.
var groupOutput = encode(map[string]any{
	"type": "object",
	"properties": map[string]any{
		"group":  map[string]any{"type": "string"},
		"action": map[string]any{"type": "string"},
		"results": map[string]any{"type": "array", "items": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"member": map[string]any{"type": "string"},
				"status": map[string]any{"type": "string"},
				"output": map[string]any{},
				"error":  map[string]any{"type": "object"},
			},
			"required": []any{"member", "status"},
		}},
	},
	"required": []any{"group", "action", "results"},
})

// nameAll names every tool: a Thing's by its title's slug (with a tag of
// its id when another Thing's title reads the same), a group's by "group_"
// and its id's slug; any name still taken twice (a cut name, actions whose
// names read the same) gets a tag of its Thing and action.
func nameAll(things map[string]*entry, groups map[string][]string) map[string]*ref {
	bySlug := map[string]int{}
	for _, e := range things {
		bySlug[e.slug]++
	}
	type named struct {
		name string
		r    *ref
	}
	var all []named
	for id, e := range things {
		dis := ""
		if bySlug[e.slug] > 1 {
			dis = tag(id)
		}
		for _, a := range e.actions {
			all = append(all, named{toolName(e.slug, dis, a, id), &ref{prefix: e.slug, thing: id, action: a}})
		}
	}
	for gid, actions := range groups {
		prefix := "group_" + slug(gid, true)
		for _, a := range actions {
			all = append(all, named{toolName(prefix, "", a, "group:"+gid), &ref{prefix: prefix, group: gid, action: a}})
		}
	}
	// In a fixed order, so that resolving clashes gives the same names
	// whatever order the maps gave.
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i].r, all[j].r
		if a.thing+"\x00"+a.group != b.thing+"\x00"+b.group {
			return a.thing+"\x00"+a.group < b.thing+"\x00"+b.group
		}
		return a.action < b.action
	})
	count := map[string]int{findToolsName: 1, callToolName: 1} // reserved
	for _, n := range all {
		count[n.name]++
	}
	out := make(map[string]*ref, len(all))
	taken := func(name string) bool { return out[name] != nil || name == findToolsName || name == callToolName }
	for _, n := range all {
		if count[n.name] > 1 || taken(n.name) {
			key := n.r.thing
			if n.r.group != "" {
				key = "group:" + n.r.group
			}
			// Tagged by Thing and action; a tag that clashes again (a
			// title made to read like one) is tagged once more.
			for i := 0; ; i++ {
				n.name = toolName(n.r.prefix, tag(fmt.Sprint(key, "\x00", n.r.action, "\x00", i)), n.r.action, key)
				if !taken(n.name) && count[n.name] == 0 {
					break
				}
			}
		}
		out[n.name] = n.r
	}
	return out
}

// groupActions are, per group, the actions some member has.
func groupActions(groups []hub.Group, things map[string]*entry) map[string][]string {
	out := map[string][]string{}
	for i := range groups {
		seen := map[string]bool{}
		var actions []string
		for _, id := range groups[i].MemberIDs() {
			if e := things[id]; e != nil {
				for _, a := range e.actions {
					if !seen[a] {
						seen[a] = true
						actions = append(actions, a)
					}
				}
			}
		}
		if len(actions) > 0 {
			sort.Strings(actions)
			out[groups[i].ID] = actions
		}
	}
	return out
}

// sortedNames lists the names of m, sorted.
func sortedNames(m map[string]*ref) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
