package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// enrichmentMembers are the members Enriched adds or replaces at the top
// level of every TD the directory serves (PROTOCOL §3.1).
var enrichmentMembers = []string{"registration", "lmos:presence", "lmos:origin", "lmos:verified"}

// StripEnrichment returns doc, a TD as the directory serves it (GET
// /things/{id}), without what Enriched added, so that a proof made over
// the submitted document verifies again (PROTOCOL §6): registration and
// the lmos:presence, lmos:origin and lmos:verified members go, and the
// @context becomes the proof's own @context (eddsa-jcs-2022 copies the
// signed document's context into the proof) when the served one is
// exactly that context as Enriched extends it. Anything else is left as
// it is, for the verification to judge. A document the signer gave a
// registration member of its own (a ttl) only verifies as submitted
// (?enriched=false), since the hub replaces that member.
func StripEnrichment(doc []byte) ([]byte, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(doc, &members); err != nil || members == nil {
		return nil, fmt.Errorf("the document is not a JSON object: %v", err)
	}
	for _, m := range enrichmentMembers {
		delete(members, m)
	}
	var p struct {
		Context json.RawMessage `json:"@context"`
	}
	if raw, ok := members["proof"]; ok && json.Unmarshal(raw, &p) == nil && p.Context != nil {
		if served, ok := members["@context"]; ok {
			signed, errS := decodeAny(p.Context)
			got, errG := decodeAny(served)
			// As this hub serves it, or as one before lmos had its '#'
			// did (a copy read then verifies still).
			if errS == nil && errG == nil && (reflect.DeepEqual(normalize(enrichedContext(signed)), normalize(got)) ||
				reflect.DeepEqual(normalize(legacyEnrichedContext(signed)), normalize(got))) {
				members["@context"] = p.Context
			}
		}
	}
	out, err := json.Marshal(members)
	if err != nil {
		return nil, fmt.Errorf("the document cannot be re-encoded: %w", err)
	}
	return out, nil
}

func decodeAny(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// normalize gives a value built in Go (lmosContext is a map[string]any
// literal) the shape decoding gives it, for comparison.
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	n, err := decodeAny(b)
	if err != nil {
		return v
	}
	return n
}
