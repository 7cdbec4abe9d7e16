package mcpdoor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// putTool registers, over HTTP, a Thing of type typ with one action
// "measure" (forms included, as the directory requires).
func putThing(t testing.TB, h *hubtest.Hub, id, title, typ, desc string) {
	t.Helper()
	td := agentTD(id, title, map[string]any{"measure": map[string]any{
		"description": "Measures something.",
		"input":       map[string]any{"type": "string"},
		"forms":       []any{map[string]any{"href": "mqtt://hub.local/lmos/v1/things/" + id + "/actions/measure"}},
	}})
	td["@type"] = typ
	td["description"] = desc
	h.Put(id, []byte(mustJSON(td)))
}

// TestManyThingsAreFoundNotListed: with more tools than mcp.maxTools the
// list shows only find_tools and call_tool; find_tools finds a Thing by
// what it does, and both its name and call_tool reach it.
func TestManyThingsAreFoundNotListed(t *testing.T) {
	h := startHub(t, func(c *app.Config) { c.MCP.MaxTools = 10 })
	for i := range 12 {
		putThing(t, h, fmt.Sprintf("urn:test:sensor-%02d", i), fmt.Sprintf("Sensor %02d", i), "lmos:Tool", "A humidity sensor in the cellar.")
	}
	simpleAgent(t, h, "urn:test:dbl", "Number doubler")
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			c := connect(t, h, v, "", "")
			c.waitTools(t, "list only the door's tools", func(m map[string]*mcp.Tool) bool {
				return len(m) == 2 && m["find_tools"] != nil && m["call_tool"] != nil
			})
			res := c.call(t, "find_tools", map[string]any{"query": "doubler"})
			var found struct {
				Tools []struct{ Name, Thing, Action string }
			}
			if res.IsError || json.Unmarshal([]byte(mustJSON(res.StructuredContent)), &found) != nil || len(found.Tools) != 1 ||
				found.Tools[0].Name != "number_doubler__do" || found.Tools[0].Thing != "urn:test:dbl" {
				t.Fatalf("find_tools doubler: error=%v %s", res.IsError, text(res))
			}
			if res := c.call(t, "number_doubler__do", map[string]any{"n": 21}); res.IsError || mustJSON(res.StructuredContent) != `{"twice":42}` {
				t.Errorf("an unlisted tool by name: %s", text(res))
			}
			res = c.call(t, "call_tool", map[string]any{"thing": "urn:test:dbl", "action": "do", "input": map[string]any{"n": 5}})
			if res.IsError || mustJSON(res.StructuredContent) != `{"twice":10}` {
				t.Errorf("call_tool: %s", text(res))
			}
			res = c.call(t, "find_tools", map[string]any{"query": "humidity cellar", "limit": 3})
			if res.IsError || json.Unmarshal([]byte(mustJSON(res.StructuredContent)), &found) != nil || len(found.Tools) != 3 {
				t.Errorf("find_tools humidity, limit 3: %s", text(res))
			}
			for _, bad := range []struct {
				args any
				want string
			}{
				{map[string]any{"query": ""}, "query"},
				{map[string]any{"query": "x", "colour": "red"}, "colour"},
			} {
				if res := c.call(t, "find_tools", bad.args); !res.IsError || !strings.Contains(text(res), bad.want) {
					t.Errorf("find_tools %v: error=%v %s", bad.args, res.IsError, text(res))
				}
			}
			for _, bad := range []struct {
				args any
				want string
			}{
				{map[string]any{"thing": "urn:test:none", "action": "do"}, "urn:test:none"},
				{map[string]any{"thing": "urn:test:dbl", "action": "nope"}, "no action \"nope\""},
				{map[string]any{"thing": "urn:test:dbl"}, "either an action or a property"},
				{map[string]any{"thing": "urn:test:dbl", "action": "do", "input": map[string]any{"n": "x"}}, "integer"},
			} {
				if res := c.call(t, "call_tool", bad.args); !res.IsError || !strings.Contains(text(res), bad.want) {
					t.Errorf("call_tool %v: error=%v %s", bad.args, res.IsError, text(res))
				}
			}
		})
	}
}

// TestFilterNarrowsTheList: ?type=, ?group= and ?jsonpath= on the URL
// list the tools of the Things that match; group tools are tools too.
func TestFilterNarrowsTheList(t *testing.T) {
	h := startHub(t, func(c *app.Config) { c.MCP.MaxTools = 100 })
	putThing(t, h, "urn:test:tool-1", "Hygrometer", "lmos:Tool", "Measures humidity.")
	simpleAgent(t, h, "urn:test:ag-1", "Kitchen helper")
	simpleAgent(t, h, "urn:test:ag-2", "Garden helper")
	body := `{"id":"helpers","title":"Helpers","members":["urn:test:ag-1","urn:test:ag-2"]}`
	if resp, b := h.Do(http.MethodPost, "/api/groups", "application/json", []byte(body), hubtest.Token); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create group: %d %s", resp.StatusCode, b)
	}
	all := []string{"call_tool", "find_tools", "garden_helper__do", "group_helpers__do", "hygrometer__measure", "kitchen_helper__do"}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", all},
		{"?type=Agent", []string{"call_tool", "find_tools", "garden_helper__do", "kitchen_helper__do"}},
		{"?type=lmos:Tool", []string{"call_tool", "find_tools", "hygrometer__measure"}},
		{"?type=Tool&type=Agent", []string{"call_tool", "find_tools", "garden_helper__do", "hygrometer__measure", "kitchen_helper__do"}},
		{"?group=helpers", []string{"call_tool", "find_tools", "garden_helper__do", "group_helpers__do", "kitchen_helper__do"}},
		{"?jsonpath=" + url.QueryEscape(`$[?@.title=="Garden helper"]`), []string{"call_tool", "find_tools", "garden_helper__do"}},
	} {
		for _, v := range versions {
			c := connect(t, h, v, "/mcp"+tc.query, "")
			c.waitTools(t, "list "+tc.query, func(m map[string]*mcp.Tool) bool {
				got := names(m)
				return strings.Join(sorted(got), " ") == strings.Join(tc.want, " ")
			})
		}
	}
	// The group's tool calls each member.
	c := connect(t, h, v2026, "/mcp?group=helpers", "")
	res := c.call(t, "group_helpers__do", map[string]any{"n": 4})
	want := `{"action":"do","group":"helpers","results":[{"member":"urn:test:ag-1","output":{"twice":8},"status":"completed"},{"member":"urn:test:ag-2","output":{"twice":8},"status":"completed"}]}`
	if res.IsError || mustJSON(res.StructuredContent) != want {
		t.Errorf("group tool: error=%v %s", res.IsError, mustJSON(res.StructuredContent))
	}
	// A bad query is the protocol's error on tools/list.
	c = connect(t, h, v2026, "/mcp?jsonpath="+url.QueryEscape("$[?@.x=="), "")
	if _, err := c.ListTools(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "jsonpath") {
		t.Errorf("bad jsonpath: %v", err)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestResourcesAreTDsAndValues: each Thing's TD is a resource; a readable
// property's value is one too; an unknown one is the protocol's error.
func TestResourcesAreTDsAndValues(t *testing.T) {
	h := startHub(t, nil)
	putThing(t, h, "urn:test:res/1", "Resource Thing", "lmos:Tool", "Has a TD.")
	for _, v := range versions {
		c := connect(t, h, v, "", "")
		list, err := c.ListResources(context.Background(), nil)
		if err != nil || len(list.Resources) != 1 || list.Resources[0].URI != "lmos://things/urn%3Atest%3Ares%2F1" || list.Resources[0].Title != "Resource Thing" {
			t.Fatalf("%s resources/list: %v %s", v, err, mustJSON(list))
		}
		res, err := c.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: list.Resources[0].URI})
		if err != nil || len(res.Contents) != 1 {
			t.Fatalf("%s read: %v", v, err)
		}
		var td map[string]any
		if json.Unmarshal([]byte(res.Contents[0].Text), &td) != nil || td["id"] != "urn:test:res/1" || res.Contents[0].MIMEType != "application/td+json" {
			t.Errorf("%s read: %.200s", v, res.Contents[0].Text)
		}
		for _, uri := range []string{"lmos://things/urn%3Atest%3Anone", "lmos://things/", "lmos://elsewhere/x", "lmos://things/a/b"} {
			if _, err := c.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri}); err == nil || !strings.Contains(strings.ToLower(err.Error()), "not found") {
				t.Errorf("%s read %s: %v", v, uri, err)
			}
		}
	}
}

// TestPropertyValues: a readable property's value is read from the Thing
// through its resource and through call_tool; a write-only one, or an
// unknown one, is refused.
func TestPropertyValues(t *testing.T) {
	h := startHub(t, nil)
	td := agentTD("urn:test:thermo", "Thermometer", nil)
	delete(td, "actions")
	td["properties"] = map[string]any{
		"temperature": map[string]any{"type": "number", "readOnly": true, "observable": true},
		"secret":      map[string]any{"type": "string", "writeOnly": true},
	}
	a := connectAgent(t, h, mqttURL(h), td, nil)
	if err := a.SetProperty("temperature", 21.5); err != nil {
		t.Fatal(err)
	}
	uri := "lmos://things/urn%3Atest%3Athermo/properties/temperature"
	for _, v := range versions {
		c := connect(t, h, v, "", "")
		res, err := c.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
		if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "21.5" {
			t.Fatalf("%s read %s: %v %s", v, uri, err, mustJSON(res))
		}
		call := c.call(t, "call_tool", map[string]any{"thing": "urn:test:thermo", "property": "temperature"})
		if call.IsError || text(call) != "21.5" {
			t.Errorf("%s call_tool property: error=%v %s", v, call.IsError, text(call))
		}
		for prop, want := range map[string]string{"secret": "write-only", "nope": "no property"} {
			call := c.call(t, "call_tool", map[string]any{"thing": "urn:test:thermo", "property": prop})
			if !call.IsError || !strings.Contains(text(call), want) {
				t.Errorf("%s call_tool property %s: error=%v %s", v, prop, call.IsError, text(call))
			}
		}
	}
}

// TestNamesSurviveARestart: tool names come from the Things alone, so a
// client's names are the same after the hub restarts; two Things with the
// same title each carry a tag of their id.
func TestNamesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	listNames := func() string {
		h := hubtest.StartIn(t, dir, func(c *app.Config) { c.MCP.MaxTools = 100 })
		defer h.Close()
		if thingCount(t, h) == 0 {
			for i, id := range []string{"urn:test:lamp-b", "urn:test:lamp-a", "urn:test:fan"} {
				title := "Ceiling lamp"
				if i == 2 {
					title = "Ceiling fan"
				}
				putThing(t, h, id, title, "lmos:Tool", "Lights or air.")
			}
		}
		// Clients of both revisions hold notification streams open while
		// the hub stops: stopping must not wait for them.
		connect(t, h, v2025, "", "").waitTools(t, "list the three Things", func(m map[string]*mcp.Tool) bool { return len(m) == 5 })
		c := connect(t, h, v2026, "", "")
		tools := c.waitTools(t, "list the three Things", func(m map[string]*mcp.Tool) bool { return len(m) == 5 })
		return strings.Join(sorted(names(tools)), " ")
	}
	first := listNames()
	if !strings.Contains(first, "ceiling_fan__measure") || strings.Count(first, "ceiling_lamp_") != 2 {
		t.Fatalf("names: %s", first)
	}
	if again := listNames(); again != first {
		t.Fatalf("names after a restart: %s, before: %s", again, first)
	}
}

// TestChangedTDChangesTheTool: a Thing's new description (here a new
// input schema) is what the next listing shows, announced as a change;
// the door's cache of tool descriptions never serves the old one.
func TestChangedTDChangesTheTool(t *testing.T) {
	h := startHub(t, nil)
	put := func(max int) {
		td := agentTD("urn:test:dial", "Dial", map[string]any{"turn": map[string]any{
			"input": map[string]any{"type": "object", "properties": map[string]any{"to": map[string]any{"type": "integer", "maximum": max}}},
			"forms": []any{map[string]any{"href": "mqtt://hub.local/lmos/v1/things/urn:test:dial/actions/turn"}},
		}})
		h.Put("urn:test:dial", []byte(mustJSON(td)))
	}
	put(10)
	c := connect(t, h, v2025, "", "")
	c.waitTools(t, "list dial__turn", func(m map[string]*mcp.Tool) bool {
		return m["dial__turn"] != nil && strings.Contains(mustJSON(m["dial__turn"].InputSchema), `"maximum":10`)
	})
	c.drainChanged()
	put(20)
	c.waitChanged(t, "the TD changed")
	c.waitTools(t, "show the new maximum", func(m map[string]*mcp.Tool) bool {
		return m["dial__turn"] != nil && strings.Contains(mustJSON(m["dial__turn"].InputSchema), `"maximum":20`)
	})
}
