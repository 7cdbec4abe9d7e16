// Package dirsync keeps this hub's registry and a remote W3C WoT Thing
// Description Directory in step (PROTOCOL §9). It speaks only the standard
// directory API (GET /things, GET/PUT/DELETE /things/{id}, GET /events),
// so the remote may be any directory, another lmos-hub included.
//
// Pusher (push.go) sends the local Things to the remote: it subscribes to
// the registry's change feed like every other consumer, queues each change
// in a durable outbox (hub.Outbox, kept in the store) and sends the queue
// in order, with a TTL the remote ages the copies out by should this hub
// go away. Mirrored Things (lmos:origin.source "remote") are never pushed.
package dirsync
