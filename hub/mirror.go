package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Mirrored Things (PROTOCOL §9): copies of the Things of a remote
// directory (a sync.pull, a federation peer), stored with lmos:origin
// {source: remote, hub: <the directory>}. They are read-only here: only
// the directory's Puller changes them (Mirror, Unmirror), and only the
// Thing's own agent takes one back (a join with its key's proof or its
// credential: it moved here). The rules run in the write loop, on the
// state the batch so far left, like every other write.

// Mirror stores raw, the Thing id as the remote directory from serves it
// (enriched or not), as a mirror; it reports whether the Thing is new
// here. The enrichment the remote added is stripped (so a proof verifies
// again), the rest is validated like any write; the remote's lmos:presence
// and registration.expires are kept. A copy never replaces a local Thing
// that is online here, never overrides the key binding of its id (a bound
// id's copy must carry a proof by that key), and replaces an offline local
// Thing only when it carries that proof (the agent moved to the remote).
// A copy equal to the stored mirror changes nothing but its presence.
func (r *Registry) Mirror(ctx context.Context, id string, raw []byte, from string) (bool, error) {
	if err := ValidateID(id); err != nil {
		return false, err
	}
	if from == "" {
		return false, Errorf(EINVALID, "a mirrored Thing must name the directory it comes from")
	}
	if len(raw) > r.opts.MaxTDBytes+MirrorEnrichmentSlack {
		// The stripped copy is held to the limit itself (prepareFrom).
		return false, TooLarge(len(raw), r.opts.MaxTDBytes)
	}
	status, expires := remoteRegistration(raw)
	doc, err := StripEnrichment(raw)
	if err != nil {
		return false, &Error{Code: EINVALID, Message: "the remote Thing Description is not a JSON object",
			Fields: []FieldError{{Field: "", Description: "must be a JSON object"}}}
	}
	p, err := r.prepareFrom(doc, "")
	if err != nil {
		return false, err
	}
	if got := p.ID(); got != id {
		return false, &Error{Code: EINVALID, Message: fmt.Sprintf("the remote Thing Description's id must equal the id it is listed under (%q)", id),
			Fields: []FieldError{{Field: "/id", Description: fmt.Sprintf("is %s, want %q", describe(p.doc["id"]), id)}}}
	}
	if unchanged, err := r.mirrorUnchanged(ctx, id, p.raw, from, status); unchanged || err != nil {
		return false, err
	}
	res := r.submit(ctx, &op{kind: opPut, id: id, raw: p.raw, doc: p.doc, sum: p.sum, sumEnc: p.enc,
		origin: Origin{Source: SourceRemote, Hub: from}, signer: p.signer, mirror: true, presence: status, mirrorExpires: expires})
	return res.created, res.err
}

// mirrorUnchanged reports whether id is already the mirror from `from` of
// exactly raw; its presence is brought to status then. A poll or resync
// reads every Thing again: an unchanged one must not be a change.
func (r *Registry) mirrorUnchanged(ctx context.Context, id string, raw []byte, from, status string) (bool, error) {
	t, err := r.Get(id)
	if err != nil || t.Meta.Origin.Source != SourceRemote || t.Meta.Origin.Hub != from {
		return false, nil
	}
	stored, err := r.store.ThingRaw(id)
	if err != nil || !bytes.Equal(stored, raw) {
		return false, nil
	}
	if t.Meta.Presence.Status == status {
		return true, nil
	}
	err = r.submit(ctx, &op{kind: opPresence, id: id, presence: status, origin: Origin{Source: SourceRemote, Hub: from}}).err
	if ErrorCode(err) == ENOTFOUND {
		return false, nil // gone meanwhile: written anew
	}
	return true, err
}

// MirrorEnrichmentSlack is how much larger than registry.maxTDBytes a
// remote Thing may be as served, with the enrichment Mirror strips.
const MirrorEnrichmentSlack = 64 << 10

// remoteRegistration reads the presence and expiry a remote directory
// serves with a Thing: lmos:presence.status (unknown when absent or not
// one of the hub's) and registration.expires (zero when absent).
func remoteRegistration(raw []byte) (status string, expires time.Time) {
	var served struct {
		Presence struct {
			Status string `json:"status"`
		} `json:"lmos:presence"`
		Registration struct {
			Expires string `json:"expires"`
		} `json:"registration"`
	}
	_ = json.Unmarshal(raw, &served) // a malformed one is refused after
	switch status = served.Presence.Status; status {
	case PresenceOnline, PresenceOffline:
	default:
		status = PresenceUnknown
	}
	if t, err := ParseDateTime(served.Registration.Expires); err == nil {
		expires = t
	}
	return status, expires
}

// Unmirror deletes the Thing id if it is a mirror from `from` (ENOTFOUND
// otherwise: a Thing of this hub, or another directory's mirror, stays).
func (r *Registry) Unmirror(ctx context.Context, id, from string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	if from == "" {
		return Errorf(EINVALID, "a mirrored Thing must name the directory it comes from")
	}
	return r.submit(ctx, &op{kind: opDelete, id: id, unmirror: from}).err
}

// MirroredFrom returns the ids of the Things mirrored from `from`, in id
// order: a Puller's full read deletes those the remote no longer lists.
func (r *Registry) MirroredFrom(from string) []string {
	now := r.opts.Now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	var ids []string
	for _, id := range r.ids {
		t := r.things[id]
		if t.Meta.Origin.Source == SourceRemote && t.Meta.Origin.Hub == from && !t.expired(now) {
			ids = append(ids, id)
		}
	}
	return slices.Clip(ids)
}

// MirrorSources lists the directories this registry holds mirrors from
// (their lmos:origin.hub), sorted.
func (r *Registry) MirrorSources() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := map[string]bool{}
	for _, t := range r.things {
		if t.Meta.Origin.Source == SourceRemote {
			seen[t.Meta.Origin.Hub] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// IsMirror reports whether the Thing is a mirror of a remote directory's.
func (t *Thing) IsMirror() bool { return t.Meta.Origin.Source == SourceRemote }

// MirrorReadOnly is the refusal of a change to a mirrored Thing through
// any door but its Puller and its own agent.
func MirrorReadOnly(id, home string) error {
	return Errorf(EFORBIDDEN, "the Thing %q is a read-only mirror of the Thing registered at %s: change it there", id, home)
}

// mirrorRule applies the rules of mirrored Things to o, whose Thing is
// now old (nil when absent); errUnchanged makes o succeed without a
// change. Called in the write loop.
func (r *Registry) mirrorRule(o *op, old *Thing) error {
	if o.mirror {
		return r.judgeMirror(o, old)
	}
	mirrored := old != nil && old.IsMirror()
	if o.unmirror != "" {
		if !mirrored || old.Meta.Origin.Hub != o.unmirror {
			return Errorf(ENOTFOUND, "no Thing %q mirrored from %s", o.id, o.unmirror)
		}
		return nil
	}
	if !mirrored {
		return nil
	}
	switch o.kind {
	case opExpire, opBind, opDropCred:
		return nil
	case opPresence:
		if o.origin.Source == SourceRemote {
			return nil
		}
		return errUnchanged // its presence is the remote's, not a stale local connection's
	case opDelete:
		if o.dropCred {
			return errUnchanged // its agent deregistered here: only its credential goes
		}
	case opPut, opCreate:
		if r.ownsMirrored(o, old) {
			return nil
		}
	}
	return MirrorReadOnly(o.id, old.Meta.Origin.Hub)
}

// ownsMirrored reports whether the local write o is the mirrored Thing
// old's own agent joining here: signed by the key its id is bound to (by
// the key its copy was verified by, when the id is bound to none here),
// or by the holder of its MQTT credential.
func (r *Registry) ownsMirrored(o *op, old *Thing) bool {
	if o.origin.Source == SourceMQTT && o.origin.Owner {
		return true
	}
	s := o.signer
	if s == nil {
		return false
	}
	if b := r.bindingOf(o.id); b != nil {
		return s.DID == b.DID
	}
	return old.Meta.Verified != "" && s.DID == old.Meta.Verified
}

// judgeMirror decides whether the copy o from a remote directory may take
// the place of old.
func (r *Registry) judgeMirror(o *op, old *Thing) error {
	from, s := o.origin.Hub, o.signer
	b := r.bindingOf(o.id)
	byKey := b != nil && s != nil && s.DID == b.DID
	switch {
	case b != nil && s == nil:
		return Errorf(EFORBIDDEN, "the Thing %q is bound here to %s: its copy from %s must carry a proof by that key (PROTOCOL §6)", o.id, b.DID, from)
	case b != nil && !byKey:
		return Errorf(EFORBIDDEN, "the Thing %q is bound here to another key (%s) than the one its copy from %s is signed by (%s)", o.id, b.DID, from, s.DID)
	case byKey && s.Created.Before(b.Created):
		return Errorf(ECONFLICT, "the copy of %q from %s was signed %s, before the description last accepted here (%s)",
			o.id, from, s.Created.Format(time.RFC3339), b.Created.UTC().Format(time.RFC3339))
	case old == nil:
		return nil
	case old.IsMirror():
		if old.Meta.Origin.Hub == from || byKey || old.Meta.Presence.Status != PresenceOnline {
			return nil // an update, or the agent moved on from the other directory
		}
		return Errorf(ECONFLICT, "the Thing %q is mirrored here from %s, where it is online", o.id, old.Meta.Origin.Hub)
	case old.Meta.Presence.Status == PresenceOnline:
		return Errorf(ECONFLICT, "the Thing %q is online here: its copy from %s does not replace it", o.id, from)
	case !byKey:
		return Errorf(ECONFLICT, "the Thing %q is registered here: a copy from %s replaces it only when its id is bound to a key and the copy carries that key's proof (the agent moved there)", o.id, from)
	case !s.Created.After(b.Created):
		// The description accepted here, come back (this hub's own Thing
		// pushed to the remote): an agent that moved signed anew.
		return Errorf(ECONFLICT, "the Thing %q is registered here, and its copy from %s is no newer than the description accepted here", o.id, from)
	}
	return nil
}
