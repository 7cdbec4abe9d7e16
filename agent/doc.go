// Package agent is the Go client library of an LMOS agent on lmos-hub: it
// joins the hub over MQTT 5 with a W3C WoT Thing Description, serves the
// Thing's actions and property writes, publishes its properties and events,
// and consumes other Things (PROTOCOL §4).
//
// Connect publishes the TD on lmos/v1/things/{tid}/td, takes the
// credentials of the …/td/result, and reconnects with them: the hub's ACL
// lets only the authenticated Thing publish its own properties, events and
// status and read its own action requests. The agent leaves a retained
// will "offline" on …/status and publishes "online"; after a lost
// connection it reconnects with capped, jittered exponential backoff and
// re-joins. Affordances without forms get hub forms (href
// mqtt://host:port/<topic> plus mqv:topic or mqv:filter).
//
// Actions follow the MQTT 5 request/response pattern: results go to the
// request's Response Topic with its Correlation Data and the user property
// lmos-status (running for each partial result, then completed, or failed
// with a *Problem). Payloads are JSON or CBOR, by the MQTT 5 Content Type.
// Results go only to a reply inbox (a Response Topic under
// lmos/v1/clients/); a request naming any other topic runs without results.
// Each request runs its handler on a goroutine of its own, so handlers run
// concurrently, at most 64 at once (beyond that requests get a 503
// problem); WriteProperty returns once the broker took the value (WithAck
// waits for the agent's result); callbacks of Observe and Subscribe run in order on the
// receive goroutine and must return quickly.
//
//	a, err := agent.Connect(ctx, agent.Options{
//		URL: "mqtt://localhost:1883",
//		TD: map[string]any{
//			"id":      "urn:example:greeter",
//			"title":   "Greeter",
//			"@type":   "lmos:Agent",
//			"actions": map[string]any{"greet": map[string]any{}},
//		},
//	})
//	if err != nil {
//		return err
//	}
//	defer a.Close()
//	a.HandleAction("greet", func(ctx context.Context, in agent.Input) (any, error) {
//		var req struct{ Name string }
//		if err := in.Decode(&req); err != nil {
//			return nil, err // a 400 problem
//		}
//		return map[string]string{"text": "hello " + req.Name}, nil
//	})
//
//	out, err := a.Invoke(ctx, "urn:example:greeter", "greet", map[string]string{"name": "Ada"})
//
// With a ws:// or wss:// URL (the hub's /ws) the agent speaks the LMOS
// WebSocket envelope instead (PROTOCOL §5) with the same API: it registers
// its TD with registerThing, serves the requests the hub forwards on the
// socket, sends its properties and events as propertyReading and event
// messages, and consumes other Things with consumer messages. Closing the
// socket makes it offline; it reconnects and registers again by itself.
// There are no credentials over WebSocket: Credentials stays nil.
//
// Inside, the Agent keeps what both transports share (the TD, handlers,
// property values, handler slots, Close) and talks to the hub through one
// unexported link: mqttLink (link_mqtt.go) or wsLink (link_ws.go).
package agent
