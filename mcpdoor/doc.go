// Package mcpdoor is the hub's Model Context Protocol door (PROTOCOL §11).
//
// Every action of every registered Thing is an MCP tool, every agent group
// action too, and every Thing Description a resource; find_tools and
// call_tool let a model reach Things beyond the listed tools. A call goes
// through the hub's Router, the path of every other door, so an MCP client
// reaches MQTT and WebSocket agents alike, and the hub's one access policy
// decides what each client sees and may do.
//
// The door serves Streamable HTTP with the official Go SDK: requests of
// revision 2026-07-28 and later go to a stateless handler (the revision
// has no sessions), earlier ones to a stateful handler with sessions and
// a GET stream for notifications. Both share one SDK server, so both see
// the same tools and hear the same list changes. `lmos-hub mcp` relays
// stdio to this door.
package mcpdoor
