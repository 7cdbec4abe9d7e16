package mcpdoor

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The catalog is the door's view of the directory: one spec per tool.
// sync rebuilds it from the registry, reusing each Thing's specs while its
// description is unchanged (the same Summary), and tells the SDK server
// only what changed, so a Thing joining adds its tools and announces one
// list change.

// spec is one tool: a Thing's action or a group's.
type spec struct {
	name   string
	prefix string // the name's first part (nameAll)
	thing  string // the Thing's id; "" for a group tool
	group  string // the group's id; "" for a Thing's tool
	action string
	title  string // the tool's title: the Thing's and the action's
	desc   string
	// in and out are the inputSchema and outputSchema (out nil: none),
	// as JSON: with thousands of tools, the encoded form takes a tenth of
	// the memory of the decoded one, and is what the clients are sent.
	in, out json.RawMessage
	// noInput says the action takes no input (its tool takes {}).
	noInput bool
	// inWrapped and outWrapped say the action's input and output travel
	// wrapped in an object (schema.go); chat says the tool takes one
	// message for a conversation's input.
	inWrapped, outWrapped, chat bool
	readOnly                    bool // the action is safe (TD "safe")
	idempotent                  bool
	// fp is a digest of everything the client sees of the tool but its
	// name, so sync re-announces a tool only when it changed.
	fp [32]byte
	// actDesc is what the TD says of the action alone.
	actDesc string
	// tool is what the SDK server holds (sync).
	tool *mcp.Tool
	// check validates outputs against out (shared by the copies nameAll
	// makes).
	check *outChecker
}

// outChecker is an output schema compiled on first use.
type outChecker struct {
	once   sync.Once
	schema *jsonschema.Schema
	err    error
}

// thingSpecs are a Thing's tools before names are given.
type thingSpecs struct {
	sum   *hub.Summary // the description they were made from
	title string
	slug  string
	specs []*spec
}

// catalog is one state of the tools: by name, and per Thing.
type catalog struct {
	byName  map[string]*spec
	names   []string // sorted
	things  map[string]*thingSpecs
	ofThing map[string][]string // Thing id → its tool names
}

func (c *catalog) lookup(name string) *spec {
	if c == nil {
		return nil
	}
	return c.byName[name]
}

// fingerprint digests what a client sees of s besides its name.
func (s *spec) fingerprint() {
	b, _ := json.Marshal([]any{s.thing, s.group, s.action, s.title, s.desc, s.in, s.out, s.inWrapped, s.outWrapped, s.chat, s.readOnly, s.idempotent})
	s.fp = sha256.Sum256(b)
}

// thingSpecsOf builds the specs of a Thing's actions from its description.
func thingSpecsOf(t hub.Thing, doc map[string]any) *thingSpecs {
	title, _ := doc["title"].(string)
	ts := &thingSpecs{sum: t.Summary, title: title, slug: slug(title, true)}
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
		s.fingerprint()
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

// groupSpecs builds the tools of a group: one per action some member has,
// its input schema from the first member (by id) that has it.
func groupSpecs(g *hub.Group, things map[string]*thingSpecs) []*spec {
	first := map[string]*spec{}
	var names []string
	for _, id := range g.MemberIDs() {
		ts := things[id]
		if ts == nil {
			continue
		}
		for _, s := range ts.specs {
			if _, ok := first[s.action]; !ok {
				first[s.action] = s
				names = append(names, s.action)
			}
		}
	}
	sort.Strings(names)
	title := g.Title
	if title == "" {
		title = g.ID
	}
	about := fmt.Sprintf("Group %q (%s) of %d members: invokes the action on every member that has it, in parallel, and returns one result per member.", title, g.ID, len(g.Members))
	if g.Description != "" {
		about += " " + g.Description
	}
	specs := make([]*spec, 0, len(names))
	for _, name := range names {
		m := first[name]
		s := &spec{group: g.ID, action: name, in: m.in, inWrapped: m.inWrapped, noInput: m.noInput, chat: m.chat, actDesc: m.actDesc, check: &outChecker{}}
		s.title = joinTitle("Group "+title, name)
		// A group answers with every member's result, not one output.
		s.out = groupOutput
		s.describe(about)
		s.fingerprint()
		specs = append(specs, s)
	}
	return specs
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

// nameAll gives every spec its name: Things by their title slug (with a
// tag of the id when another Thing's title reads the same), groups by
// "group_" and their id's slug; any name still taken twice (a cut name,
// actions whose names read the same) gets a tag of its Thing and action.
func nameAll(things map[string]*thingSpecs, groups map[string][]*spec) map[string]*spec {
	bySlug := map[string]int{}
	for _, ts := range things {
		bySlug[ts.slug]++
	}
	var all []*spec
	for id, ts := range things {
		dis := ""
		if bySlug[ts.slug] > 1 {
			dis = tag(id)
		}
		for _, tmpl := range ts.specs {
			all = append(all, named(tmpl, ts.slug, toolName(ts.slug, dis, tmpl.action, id)))
		}
	}
	for gid, specs := range groups {
		for _, s := range specs {
			prefix := "group_" + slug(gid, true)
			all = append(all, named(s, prefix, toolName(prefix, "", s.action, "group:"+gid)))
		}
	}
	count := map[string]int{}
	for _, s := range all {
		count[s.name]++
	}
	count[findToolsName]++ // reserved
	count[callToolName]++
	out := make(map[string]*spec, len(all))
	for _, s := range all {
		if count[s.name] > 1 {
			key := s.thing
			if s.group != "" {
				key = "group:" + s.group
			}
			s = named(s, s.prefix, toolName(s.prefix, tag(key+"\x00"+s.action), s.action, key))
		}
		out[s.name] = s
	}
	return out
}

// named is s named name. A spec no catalog holds yet is named in place; a
// published one, which handlers read, is copied when its name changes (a
// namesake joined or left), so that each Thing's specs are not copied at
// every reading of the directory.
func named(s *spec, prefix, name string) *spec {
	switch {
	case s.name == name:
		return s
	case s.name == "":
		s.prefix, s.name = prefix, name
		return s
	}
	cp := *s
	cp.prefix, cp.name, cp.tool = prefix, name, nil
	return &cp
}

// sortedNames lists the names of m, sorted.
func sortedNames(m map[string]*spec) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
