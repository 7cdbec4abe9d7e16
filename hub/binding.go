package hub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/ratelimit"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// Key-bound ids (PROTOCOL §6): the first accepted signed description of an
// id binds the id to its signer's DID — of a new Thing by anyone who may
// register it, of a registered Thing only by its owner (Origin.Owner) or
// an admin; from then on every description of that id must carry a valid
// proof by the same DID, newer than the last one accepted, unless an admin
// writes it. The check runs in the write
// loop, against the binding as the batch so far left it, so two writers
// racing for one id cannot both bind it; the proof itself is verified
// before, outside the loop (prepareFrom), once per write.

// Binding is the DID a Thing id is bound to. It outlives the Thing: a
// deleted id cannot be registered again by another key.
type Binding struct {
	ID  string `json:"-"`
	DID string `json:"did"`
	// Created is the created time of the last accepted proof; the next
	// one must be strictly later (the replay rule).
	Created time.Time `json:"created,omitzero"`
	// ProofValue is the last accepted proof's signature: the same signed
	// document sent again (an agent re-joining) is no replay.
	ProofValue string `json:"proofValue,omitempty"`
	// Since is when the id was bound to DID.
	Since time.Time `json:"since"`
}

// Signer is what a verified proof says about a description.
type Signer struct {
	DID        string
	Created    time.Time
	ProofValue string
}

// SecurityOptions are the proof rules of RegistryOptions.
type SecurityOptions struct {
	// RequireSigned refuses descriptions without a proof, on every door
	// (security.requireSigned).
	RequireSigned bool
	// MaxClockSkew is how far in the future a proof's created may lie
	// (default DefaultMaxClockSkew).
	MaxClockSkew time.Duration
	// VerifyRate and VerifyBurst bound proof verifications per client
	// source (security.verifyRate, security.verifyBurst); 0 takes the
	// defaults, a negative rate turns the limit off.
	VerifyRate  float64
	VerifyBurst int
}

// Defaults of SecurityOptions.
const (
	DefaultMaxClockSkew = 5 * time.Minute
	// A verification costs ~0.1 ms of one core on a Pi: 50 per second and
	// source is a few percent of a core even under attack, and far more
	// than an agent re-joining needs.
	DefaultVerifyRate  = 50
	DefaultVerifyBurst = 100
)

func (o SecurityOptions) withDefaults() SecurityOptions {
	if o.MaxClockSkew <= 0 {
		o.MaxClockSkew = DefaultMaxClockSkew
	}
	if o.VerifyRate == 0 {
		o.VerifyRate = DefaultVerifyRate
	}
	if o.VerifyBurst <= 0 {
		o.VerifyBurst = DefaultVerifyBurst
	}
	return o
}

// newVerifyLimiter is the per-source verification budget.
func newVerifyLimiter(o SecurityOptions, now func() time.Time) *ratelimit.Limiter {
	return ratelimit.New(max(o.VerifyRate, 0), o.VerifyBurst, now)
}

// RequireSigned reports whether unsigned descriptions are refused.
func (r *Registry) RequireSigned() bool { return r.opts.Security.RequireSigned }

// verifyDoc checks the proof of doc (raw is its JSON), at most once per
// write. from is the writer's address for the verification budget; ""
// (an admin, the hub itself) is not limited. It returns nil for an unsigned
// description the policy accepts.
func (r *Registry) verifyDoc(raw []byte, doc map[string]any, from string) (*Signer, error) {
	return r.verifyDocWith(raw, doc, from, r.sigs.check)
}

// verifyDocWith is verifyDoc with the signature checked by check: the
// write loop checks alone (proof.CheckSignature, the same rule), since it
// must not wait behind other writers' batch while every write waits for it.
func (r *Registry) verifyDocWith(raw []byte, doc map[string]any, from string, check proof.Checker) (*Signer, error) {
	if _, signed := doc["proof"]; !signed {
		if r.opts.Security.RequireSigned {
			return nil, &Error{Code: EFORBIDDEN, Limit: "security.requireSigned",
				Message: "this hub accepts only signed Thing Descriptions (security.requireSigned): add an eddsa-jcs-2022 proof (PROTOCOL §6)"}
		}
		return nil, nil
	}
	if from != "" && r.verifyLimit != nil {
		if ok, wait := r.verifyLimit.Allow(SourceOf(from)); !ok {
			return nil, &Error{Code: ERATELIMIT, Limit: "security.verifyRate",
				Message: fmt.Sprintf("too many signed descriptions from this address; retry in %s", wait.Round(time.Millisecond))}
		}
	}
	res, err := proof.VerifyWith(raw, check)
	if err != nil {
		return nil, proofError(err)
	}
	if res.Created.IsZero() {
		return nil, &Error{Code: EINVALID, Message: "the proof has no created time: the hub orders a key's descriptions by it (PROTOCOL §6)",
			Fields: []FieldError{{Field: "/proof/created", Description: "is required"}}}
	}
	if now := r.opts.Now(); res.Created.After(now.Add(r.opts.Security.MaxClockSkew)) {
		return nil, &Error{Code: EINVALID, Limit: "security.maxClockSkew",
			Message: fmt.Sprintf("the proof was created %s, more than %s after the hub's time %s (security.maxClockSkew)",
				res.Created.UTC().Format(time.RFC3339), r.opts.Security.MaxClockSkew, now.UTC().Format(time.RFC3339)),
			Fields: []FieldError{{Field: "/proof/created", Description: "is in the future"}}}
	}
	return &Signer{DID: res.DID, Created: res.Created.UTC(), ProofValue: res.Proof.ProofValue}, nil
}

// proofError maps a refusal of package proof to the hub's: every one is a
// fault of the document as sent (400), whatever the registry holds.
func proofError(err error) error {
	msg := "the proof does not verify"
	switch {
	case errors.Is(err, proof.ErrInvalidSignature):
		msg = "the proof's signature does not match the document and its key (was the description changed after signing?)"
	case errors.Is(err, proof.ErrUnsupported):
		msg = "the proof is of a kind this hub does not verify (only DataIntegrityProof, eddsa-jcs-2022, assertionMethod, did:key)"
	case errors.Is(err, proof.ErrMalformed), errors.Is(err, proof.ErrNoProof):
		msg = "the proof is malformed"
	}
	return &Error{Code: EINVALID, Message: msg, Err: err,
		Fields: []FieldError{{Field: "/proof", Description: err.Error()}}}
}

// bindingOf returns id's binding as the batch so far left it (nil: none).
// Called in the write loop.
func (r *Registry) bindingOf(id string) *Binding {
	if b, ok := r.bindOverlay[id]; ok {
		return b
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.bindings[id]
}

// checkBinding applies id's binding to a write of a whole document by o,
// whose Thing is now old (nil when absent). It returns the DID the written
// Thing is verified by ("" when unsigned) and the binding to store with
// it (nil: unchanged).
func (r *Registry) checkBinding(o *op, old *Thing, now time.Time) (verified string, nb *Binding, err error) {
	return judgeBinding(r.bindingOf(o.id), o, old, now)
}

// CheckBindingOf refuses, as a write would, a description of the new
// Thing id signed by s (nil: unsigned) that id's committed binding does
// not admit: a join parked for approval (Admission.Join) is checked at
// once, so no other key's description waits under a bound id. Approval
// checks again in the write loop.
func (r *Registry) CheckBindingOf(id string, s *Signer) error {
	r.mu.RLock()
	b := r.bindings[id]
	r.mu.RUnlock()
	_, _, err := judgeBinding(b, &op{id: id, signer: s}, nil, time.Time{})
	return err
}

// judgeBinding applies binding b (nil: none) to the write o.
func judgeBinding(b *Binding, o *op, old *Thing, now time.Time) (verified string, nb *Binding, err error) {
	s := o.signer
	if o.byProof && (b == nil || s == nil) {
		return "", nil, Errorf(EUNAUTHORIZED, "writing %q without an admin token needs a proof by the key the id is bound to", o.id)
	}
	if o.byProof && old == nil && !b.Created.IsZero() && !o.origin.JoinOpen {
		// Not an id an admin reserved for the key (a re-bind, no
		// description accepted since): its Thing was deleted, and its
		// return is a join the join mode decides.
		return "", nil, Errorf(EFORBIDDEN, "the Thing %q is not registered and joining is not open on this hub: an admin registers it, or it joins over MQTT or WebSocket to wait for approval", o.id)
	}
	switch {
	case s == nil && b == nil:
		return "", nil, nil
	case s == nil:
		if o.admin {
			return "", nil, nil // an admin's override: unverified, still bound
		}
		return "", nil, Errorf(EFORBIDDEN, "the Thing %q is bound to %s: its description must carry a proof by that key (PROTOCOL §6)", o.id, b.DID)
	case b == nil && old != nil && !o.admin && !o.origin.Owner:
		// A registered Thing is someone's: a key it never carried may
		// not claim it, with its admission and its groups.
		return "", nil, Errorf(EFORBIDDEN, "the Thing %q is registered without a key binding: only its own connection (the holder of its credentials, the WebSocket connection that registered it, the mDNS instance that announced it) or an admin may bind it to a key; an admin binds it with PUT /api/things/{id}/binding (PROTOCOL §6)", o.id)
	case b == nil:
		return s.DID, &Binding{ID: o.id, DID: s.DID, Created: s.Created, ProofValue: s.ProofValue, Since: now}, nil
	case s.DID != b.DID:
		return "", nil, Errorf(EFORBIDDEN, "the Thing %q is bound to another key (%s): an admin may re-bind it (PUT /api/things/{id}/binding)", o.id, b.DID)
	case !s.Created.After(b.Created):
		// The description it holds, sent again by its own door: from
		// another door (an anonymous PUT of an agent's Thing) it would
		// move the Thing there, and lock its agent out, on a proof anyone
		// reads from the directory.
		if s.Created.Equal(b.Created) && s.ProofValue == b.ProofValue && old != nil && old.Meta.Verified == b.DID && !o.origin.Takeover &&
			(o.admin || old.Meta.Origin.Source == o.origin.Source) {
			return s.DID, nil, nil
		}
		return "", nil, Errorf(ECONFLICT, "replayed description: the proof was created %s, not after the last accepted one of %q (%s)",
			s.Created.Format(time.RFC3339), o.id, b.Created.UTC().Format(time.RFC3339))
	}
	next := *b
	next.Created, next.ProofValue = s.Created, s.ProofValue
	return s.DID, &next, nil
}

// Binding returns the binding of id, or ENOTFOUND.
func (r *Registry) Binding(id string) (Binding, error) {
	r.mu.RLock()
	b := r.bindings[id]
	r.mu.RUnlock()
	if b == nil {
		if err := ValidateID(id); err != nil {
			return Binding{}, err
		}
		return Binding{}, Errorf(ENOTFOUND, "the Thing id %q is not bound to a key", id)
	}
	return *b, nil
}

// Rebind binds id to did (a did:key) at an admin's request, replacing any
// binding: key rotation, or an id bound before its Thing registers. The
// next description must be signed by did; the replay order starts afresh.
// A registered Thing verified by another key loses lmos:verified.
func (r *Registry) Rebind(ctx context.Context, id, did string) (Binding, error) {
	if err := ValidateID(id); err != nil {
		return Binding{}, err
	}
	norm, _, err := proof.ParseDID(did)
	if err != nil {
		return Binding{}, &Error{Code: EINVALID, Message: "did must be an Ed25519 did:key", Err: err,
			Fields: []FieldError{{Field: "/did", Description: err.Error()}}}
	}
	o := &op{kind: opBind, id: id, bindDID: norm}
	if err := r.submit(ctx, o).err; err != nil {
		return Binding{}, err
	}
	return r.Binding(id)
}

// Unbind removes the binding of id at an admin's request: the next signed
// description binds it afresh (ENOTFOUND when it is not bound).
func (r *Registry) Unbind(ctx context.Context, id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	return r.submit(ctx, &op{kind: opBind, id: id}).err
}

// prepareBind builds the record and event of an opBind: the new binding
// (or its removal) and, when the Thing was verified by another key, its
// metadata without lmos:verified. rec.ID is "" when no Thing changes.
func (r *Registry) prepareBind(o *op, old *Thing, now time.Time) (Event, ThingRecord, error) {
	if o.bindDID == "" {
		if r.bindingOf(o.id) == nil {
			return Event{}, ThingRecord{}, Errorf(ENOTFOUND, "the Thing id %q is not bound to a key", o.id)
		}
		r.bindOverlay[o.id] = nil
	} else {
		r.bindOverlay[o.id] = &Binding{ID: o.id, DID: o.bindDID, Since: now}
	}
	ev := Event{Type: EventBinding, ID: o.id, DID: o.bindDID}
	if old == nil || old.Meta.Verified == "" || old.Meta.Verified == o.bindDID {
		return ev, ThingRecord{}, nil
	}
	meta := old.Meta
	meta.Verified = ""
	o.sum = old.Summary
	return ev, ThingRecord{ID: o.id, Meta: meta}, nil
}

// loadBindings reads every stored binding at start.
func (r *Registry) loadBindings() error {
	return r.store.LoadBindings(func(b Binding) error {
		r.bindings[b.ID] = &b
		return nil
	})
}

// bindingChanges moves the batch's binding changes into b.
func (r *Registry) bindingChanges(b *Batch) {
	for id, nb := range r.bindOverlay {
		if nb == nil {
			b.DeleteBindings = append(b.DeleteBindings, id)
		} else {
			b.Bindings = append(b.Bindings, *nb)
		}
	}
}

// installBindings makes the committed binding changes visible; under r.mu.
func (r *Registry) installBindings() {
	for id, nb := range r.bindOverlay {
		if nb == nil {
			delete(r.bindings, id)
		} else {
			r.bindings[id] = nb
		}
	}
}
