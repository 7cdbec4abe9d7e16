package lmos

// ContextLMOS is the IRI of the LMOS vocabulary, the value of the "lmos"
// term in a TD's @context: {"lmos": ContextLMOS}. It ends in '#' so that a
// JSON-LD 1.1 processor uses the term as a prefix and expands lmos:Agent to
// https://eclipse.dev/lmos/protocol/v1#Agent (JSON-LD 1.1 §4.2.2: a
// simple term is a prefix only when its IRI ends in a gen-delim).
const ContextLMOS = "https://eclipse.dev/lmos/protocol/v1#"

// ContextLMOSLegacy is the IRI earlier versions defined lmos as, without
// the '#': JSON-LD 1.1 processors leave lmos:Agent unexpanded under it.
// The hub still reads documents that use it, and serves their @context
// with ContextLMOS instead (PROTOCOL §10, "lmos in the enriched @context").
const ContextLMOSLegacy = "https://eclipse.dev/lmos/protocol/v1"
