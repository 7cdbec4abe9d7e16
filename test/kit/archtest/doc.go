// Package archtest owns the house rules on imports, checked by its test on
// every `make test` from `go list -deps -json ./...` of this module:
//
//   - an adapter never depends on another adapter. Adapters are all packages
//     of the module except the domain (hub), the wire package (lmos),
//     internal/*, the agent library (agent), examples/*, cmd/* and test/*;
//     a top-level directory is one adapter, so web and web/ws are the same;
//   - the domain (hub) depends on no adapter;
//   - the domain does not import net or net/http, nor do the internal/*
//     utilities it uses;
//   - the agent library depends, even indirectly, on neither hub nor an
//     adapter, so an agent binary carries none of the hub.
//
// A failure names the offending import chain and the file of each step.
package archtest
