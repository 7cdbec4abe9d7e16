// Package dirsync keeps this hub's registry and a remote W3C WoT Thing
// Description Directory in step (PROTOCOL §9) over the standard W3C WoT
// Discovery directory API only (GET /things paged, GET/PUT/DELETE
// /things/{id}, GET /events as server-sent events with Last-Event-ID), so
// that the remote may be any directory, another lmos-hub included.
//
// Puller (pull.go) mirrors a remote directory's Things here.
//
// Pusher (push.go) sends the local Things to the remote: it subscribes to
// the registry's change feed like every other consumer, queues each change
// in a durable outbox (hub.Outbox, kept in the store) and sends the queue
// in order, with a TTL the remote ages the copies out by should this hub
// go away. Mirrored Things (lmos:origin.source "remote") are never pushed.
package dirsync
