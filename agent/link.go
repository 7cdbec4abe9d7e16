package agent

import "context"

// link is the agent's connection to the hub over one transport: MQTT 5
// (mqttLink, link_mqtt.go) or the LMOS WebSocket envelope (wsLink,
// link_ws.go). The Agent keeps what both share (the TD, handlers, the
// last property values, the handler slots, Close's contexts); a link owns
// its connection, its reconnect loop, the requests in flight and the
// observations, and serves the hub's requests with the Agent's handlers.
// Errors a method returns are final: the Agent returns them as they are,
// or wraps them as its doc comment says.
type link interface {
	// connect makes the first connection (join or registration) within
	// the Agent's ctx and returns the loop that keeps it: reconnecting,
	// re-joining, restoring observations and property values, until
	// Close. It closes Agent.done when it ends.
	connect() (run func(), err error)
	// invoke requests an action of another Thing and returns its final
	// output, passing partial ones to cfg.partial.
	invoke(ctx context.Context, thingID, action string, input any, cfg invokeConfig) (Output, error)
	// writeProperty writes a property of another Thing (cfg.ack: waits for
	// the writer's result where the transport has one).
	writeProperty(ctx context.Context, thingID, name string, value any, cfg invokeConfig) error
	// readProperty returns a property value of another Thing.
	readProperty(ctx context.Context, thingID, name string) (Value, error)
	// observe calls fn with each value of the affordance kind/name
	// ("properties" or "events") of another Thing until stop; the
	// observation survives reconnects.
	observe(ctx context.Context, thingID, kind, name string, fn func(Value)) (stop func(), err error)
	// setProperty publishes a value of the agent's own property (the Agent
	// keeps it for reconnects); while disconnected it does nothing.
	setProperty(name string, value any) error
	// emit publishes an event of the agent.
	emit(event string, data any) error
	// groupPublish publishes v on a group channel topic (groups.go).
	groupPublish(ctx context.Context, group, topic string, v any) error
	// groupSubscribe calls fn with each message on the group's topics
	// filter matches until stop; it survives reconnects.
	groupSubscribe(ctx context.Context, group, filter string, fn func(GroupMessage)) (stop func(), err error)
	// close ends the connection (after Agent.closed is closed): it stops
	// reconnecting, waits for the handlers (Agent.stopHandlers) and says
	// goodbye as the transport does.
	close() error
}
