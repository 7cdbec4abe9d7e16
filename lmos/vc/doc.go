// Package vc is the membership-credential part of the LMOS wire contract
// (docs/PROTOCOL.md §7), shared by the hub, which issues, and the agent
// library, which verifies: a W3C Verifiable Credential (VC Data Model 2.0)
// that says a Thing is a member of a hub's agent group, and the W3C
// Bitstring Status List credential that revokes it, both secured with an
// eddsa-jcs-2022 Data Integrity proof (package lmos/proof) by the hub's
// did:key.
//
// Verification is offline: the credential, the status list and the
// issuer's did:key are all a verifier needs. The status list must carry a
// validUntil and be valid at the verifier's time: a list without one
// could be replayed after a revocation for good (PROTOCOL §7.1). Every input is bounded before
// it is decoded (MaxCredentialBytes, MaxStatusListCredentialBytes, and the
// decompressed status list at exactly StatusListBytes), so a hostile
// credential or a gzip bomb costs at most those bytes.
package vc

// MediaType is the media type of a credential (VC Data Model 2.0 §6.3).
const MediaType = "application/vc"
