package mcpdoor_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestToolsReachMQTTAndWebSocketAgents lists the tools of an MQTT agent
// and a WebSocket agent and calls each, at both revisions.
func TestToolsReachMQTTAndWebSocketAgents(t *testing.T) {
	h := startHub(t, nil)
	setTarget := map[string]any{
		"description": "Set the target temperature",
		"input":       map[string]any{"type": "object", "properties": map[string]any{"celsius": map[string]any{"type": "number", "minimum": 5, "maximum": 30}}, "required": []any{"celsius"}},
		"output":      map[string]any{"type": "object", "properties": map[string]any{"accepted": map[string]any{"type": "boolean"}}},
	}
	connectAgent(t, h, mqttURL(h), agentTD("urn:test:thermo", "Living room thermostat", map[string]any{"setTarget": setTarget}), func(a *agent.Agent) {
		a.HandleAction("setTarget", func(_ context.Context, in agent.Input) (any, error) {
			var v struct{ Celsius float64 }
			if err := in.Decode(&v); err != nil {
				return nil, err
			}
			return map[string]any{"accepted": v.Celsius < 25}, nil
		})
	})
	echo := map[string]any{"input": map[string]any{"type": "string"}, "output": map[string]any{"type": "string"}}
	connectAgent(t, h, wsURL(h), agentTD("urn:test:echo", "Echo agent", map[string]any{"echo": echo}), func(a *agent.Agent) {
		a.HandleAction("echo", func(_ context.Context, in agent.Input) (any, error) {
			var s string
			if err := in.Decode(&s); err != nil {
				return nil, err
			}
			return strings.ToUpper(s), nil
		})
	})
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			c := connect(t, h, v, "", "")
			tools := c.waitTools(t, "list both agents", func(m map[string]*mcp.Tool) bool {
				return m["living_room_thermostat__setTarget"] != nil && m["echo_agent__echo"] != nil
			})
			for _, want := range []string{"find_tools", "call_tool"} {
				if tools[want] == nil {
					t.Errorf("%s not listed", want)
				}
			}
			res := c.call(t, "living_room_thermostat__setTarget", map[string]any{"celsius": 21})
			if res.IsError || mustJSON(res.StructuredContent) != `{"accepted":true}` {
				t.Fatalf("setTarget: error=%v structured=%s text=%s", res.IsError, mustJSON(res.StructuredContent), text(res))
			}
			res = c.call(t, "echo_agent__echo", map[string]any{"input": "hello"})
			if res.IsError || mustJSON(res.StructuredContent) != `{"result":"HELLO"}` {
				t.Fatalf("echo: error=%v structured=%s text=%s", res.IsError, mustJSON(res.StructuredContent), text(res))
			}
			res = c.call(t, "living_room_thermostat__setTarget", map[string]any{"celsius": 99})
			if !res.IsError || !strings.Contains(text(res), "maximum") {
				t.Fatalf("out of range input: error=%v text=%s", res.IsError, text(res))
			}
		})
	}
}

// TestConversationalAgentTakesAMessage: an agent whose action takes a
// conversation ({"messages":[{"role","content"}]}, the LMOS chat shape) is
// a tool that takes one message; the agent receives it as a user turn.
func TestConversationalAgentTakesAMessage(t *testing.T) {
	h := startHub(t, nil)
	var td map[string]any
	if err := json.Unmarshal(hubtest.Sample(t, "chat-agent.json"), &td); err != nil {
		t.Fatal(err)
	}
	connectAgent(t, h, wsURL(h), td, func(a *agent.Agent) {
		a.HandleAction("chat", func(_ context.Context, in agent.Input) (any, error) {
			var v struct {
				Messages []struct{ Role, Content string }
			}
			if err := in.Decode(&v); err != nil {
				return nil, err
			}
			if len(v.Messages) != 1 || v.Messages[0].Role != "user" {
				return nil, agent.NewProblem(400, "want one user message")
			}
			return map[string]any{"messages": []any{map[string]any{"role": "assistant", "content": "you said: " + v.Messages[0].Content}}}, nil
		})
	})
	for _, v := range versions {
		c := connect(t, h, v, "", "")
		tools := c.waitTools(t, "list the chat agent", func(m map[string]*mcp.Tool) bool { return m["service_desk_chat_agent__chat"] != nil })
		if got := mustJSON(tools["service_desk_chat_agent__chat"].InputSchema); !strings.Contains(got, `"required":["message"]`) {
			t.Errorf("%s: inputSchema %s", v, got)
		}
		res := c.call(t, "service_desk_chat_agent__chat", map[string]any{"message": "my printer is on fire"})
		if res.IsError || !strings.Contains(mustJSON(res.StructuredContent), "you said: my printer is on fire") {
			t.Errorf("%s: error=%v %s", v, res.IsError, text(res))
		}
		res = c.call(t, "service_desk_chat_agent__chat", map[string]any{"message": "hi", "mood": "bad"})
		if !res.IsError || !strings.Contains(text(res), `the arguments must be {"message": "<what to say>"}`) {
			t.Errorf("%s: an unknown member: error=%v %s", v, res.IsError, text(res))
		}
		// The whole conversation through call_tool.
		res = c.call(t, "call_tool", map[string]any{"thing": td["id"], "action": "chat", "input": map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x"}}}})
		if res.IsError || !strings.Contains(text(res), "you said: x") {
			t.Errorf("%s: call_tool with messages: %s", v, text(res))
		}
	}
}
