// Package proof is the identity part of the LMOS wire contract
// (docs/PROTOCOL.md §6), shared by the hub and the agent library: Ed25519
// keys as did:key identifiers and W3C Multikey strings, and W3C Data
// Integrity proofs with the eddsa-jcs-2022 cryptosuite over JSON documents
// such as Thing Descriptions.
//
// It only signs and checks signatures. Which key may write which Thing, how
// replays are ordered and what a proof is worth are the hub's rules (package
// hub). Every input is bounded before it is decoded: base58 decoding is
// quadratic in its input, so a hostile string could otherwise burn the CPU.
package proof
