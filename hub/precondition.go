package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// EPRECONDITION: a conditional write's If-Match / If-None-Match does not
// hold for the Thing's current version (HTTP 412).
const EPRECONDITION = lmos.CodePrecondition

// Precondition is what a conditional write (HTTP If-Match / If-None-Match,
// RFC 9110 §13.1) requires of the Thing's current version. The zero value
// requires nothing.
type Precondition struct {
	// IfMatch, when set, requires the Thing to exist and, unless
	// IfMatchAny, its version to be one of Tags (strong comparison: the
	// caller leaves weak tags out, so a list of only weak tags matches
	// nothing).
	IfMatch    bool
	IfMatchAny bool
	MatchTags  []string
	// IfNoneMatch, when set, requires the Thing to be absent (IfNoneMatchAny)
	// or its version to be none of NoneMatchTags.
	IfNoneMatch    bool
	IfNoneMatchAny bool
	NoneMatchTags  []string
}

// VersionTag is the opaque entity tag of a submitted document: it changes
// whenever its bytes do, and only then.
func VersionTag(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:16])
}

// EnrichedTag is the opaque tag of the enriched representation of t served
// from raw: it covers the document and every member the hub adds except
// registration.retrieved, which changes with every response (so it is only
// a weak validator).
func EnrichedTag(t *Thing, raw []byte) string {
	meta, _ := json.Marshal(t.Meta)
	sum := sha256.Sum256(meta)
	return VersionTag(raw) + "-" + hex.EncodeToString(sum[:8])
}

// checkPrecondition runs in the write loop, against the state the batch has
// reached so far (old is nil when the Thing is absent).
func (r *Registry) checkPrecondition(o *op, old *Thing) error {
	c := o.cond
	if !c.IfMatch && !c.IfNoneMatch {
		return nil
	}
	tag := ""
	if old != nil && (len(c.MatchTags) > 0 || len(c.NoneMatchTags) > 0) {
		raw := r.batchRaws[o.id]
		if raw == nil {
			var err error
			if raw, err = r.store.ThingRaw(o.id); err != nil {
				return &Error{Code: EINTERNAL, Message: "cannot read the stored document", Err: err}
			}
		}
		tag = VersionTag(raw)
	}
	if c.IfMatch {
		if old == nil {
			return Errorf(EPRECONDITION, "If-Match: no Thing with id %q", o.id)
		}
		if !c.IfMatchAny && !slices.Contains(c.MatchTags, tag) {
			return Errorf(EPRECONDITION, "If-Match: the Thing's current version is \"%s\"", tag)
		}
	}
	if c.IfNoneMatch && old != nil {
		if c.IfNoneMatchAny {
			return Errorf(EPRECONDITION, "If-None-Match: *: a Thing with id %q exists", o.id)
		}
		if slices.Contains(c.NoneMatchTags, tag) {
			return Errorf(EPRECONDITION, "If-None-Match: the Thing's current version is \"%s\"", tag)
		}
	}
	return nil
}

// PutIf is Put when the Thing's current version satisfies c.
func (r *Registry) PutIf(ctx context.Context, id string, raw []byte, origin Origin, c Precondition) (bool, error) {
	return r.put(ctx, id, raw, origin, c)
}

// PatchIf is Patch when the Thing's current version satisfies c.
func (r *Registry) PatchIf(ctx context.Context, id string, raw []byte, c Precondition) error {
	return r.patch(ctx, id, raw, c)
}

// DeleteIf is Delete when the Thing's current version satisfies c.
func (r *Registry) DeleteIf(ctx context.Context, id string, c Precondition) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	return r.submit(ctx, &op{kind: opDelete, id: id, cond: c}).err
}

// EnrichedTagged returns the enriched TD of id with the tags of both its
// representations, computed from the very bytes the document was built
// from: the strong one of the document as submitted and the weak one of
// the enriched document.
func (r *Registry) EnrichedTagged(id string) (doc []byte, rawTag, enrichedTag string, err error) {
	t, err := r.Get(id)
	if err != nil {
		return nil, "", "", err
	}
	now := r.opts.Now()
	err = r.store.ThingsRaw([]string{id}, func(_ string, raw []byte) error {
		doc = t.AppendEnrichedJSON(nil, raw, now)
		rawTag, enrichedTag = VersionTag(raw), EnrichedTag(&t, raw)
		return nil
	})
	if err != nil {
		return nil, "", "", &Error{Code: EINTERNAL, Message: "cannot read stored documents", Err: err}
	}
	if doc == nil {
		return nil, "", "", notFound(id) // deleted meanwhile
	}
	return doc, rawTag, enrichedTag, nil
}
