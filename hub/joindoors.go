package hub

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// JoinResult is what Admission.Join decided and did: what a door answers
// on its wire (PROTOCOL §4.4, §5).
type JoinResult struct {
	// Status is lmos.JoinAccepted, JoinPending, JoinDeleted or
	// JoinRejected (Join's error says why).
	Status string
	ID     string
	// Created says an accepted join registered a Thing new to the registry.
	Created bool
	// Unchanged says an accepted join's description equals the stored one,
	// so nothing was written (an mDNS Thing announcing itself again).
	Unchanged bool
	// Password is the credential issued with an accepted MQTT join and
	// stored, hashed, in the description's commit ("": none issued, the
	// requester holds one).
	Password string
	// ByKey says a Thing holding a credential was admitted by its bound
	// key's proof instead: its earlier credential stopped working.
	ByKey bool
	// Approval says the join mode asked for an administrator's approval:
	// the join is pending, or was refused its place on the pending list.
	Approval bool
	// TD is the description as stored (accepted) or parked (pending).
	TD []byte
}

// Join applies the join policy to one request of a door (MQTT, WebSocket,
// mDNS) and carries it out: a Thing is registered or replaced with the
// credential it is issued in one durable commit, deregistered with its
// credential, or parked for an administrator's approval (its Waiter is
// told the decision). A refused request changes nothing; its error is
// what the door answers.
func (a *Admission) Join(ctx context.Context, r JoinRequest) (JoinResult, error) {
	var res JoinResult
	var err error
	switch r.Door {
	case SourceMQTT:
		res, err = a.joinMQTT(ctx, &r)
	case SourceWS:
		res, err = a.joinAgent(ctx, &r)
	case SourceMDNS:
		res, err = a.joinDiscovered(ctx, &r)
	default:
		err = Errorf(EINTERNAL, "no door %q admits Things", r.Door)
	}
	if err != nil {
		res = JoinResult{Status: lmos.JoinRejected, ID: r.ID, Approval: res.Approval}
	}
	a.joined(&r, res, err)
	a.logJoin(&r, res, err)
	return res, err
}

// PrepareJoin does the CPU-heavy part of r's join ahead, on the caller's
// goroutine: decoding the description (once, JSON or CBOR), parsing,
// validating and summarising it, and verifying its proof (charged to
// r.Addr, security.verifyRate). Join then uses the result, and answers
// its error in its turn: a refusal of the join policy comes first.
func (a *Admission) PrepareJoin(r *JoinRequest) (*PreparedTD, error) { return a.prepare(r) }

// prepare is PrepareJoin, done at most once per request.
func (a *Admission) prepare(r *JoinRequest) (*PreparedTD, error) {
	switch {
	case r.prepared:
	case r.Doc != nil:
		r.prep, r.prepErr = a.reg.prepareDecoded(r.Doc, r.TD, r.Addr)
	default:
		r.prep, r.prepErr = a.reg.prepareMedia(r.TD, r.ContentType, r.Addr)
	}
	r.prepared = true
	return r.prep, r.prepErr
}

// Undo withdraws an accepted join whose issued credential never reached
// its agent (the door could not deliver the result): nobody holds that
// credential, and a Thing whose credential nobody holds could never join
// again. The Thing and the credential are deleted in one commit, so the
// agent's next join registers it afresh.
func (a *Admission) Undo(ctx context.Context, res JoinResult) error {
	if res.Status != lmos.JoinAccepted || res.Password == "" {
		return Errorf(EINTERNAL, "only an accepted join that issued a credential can be undone")
	}
	return a.deregister(ctx, res.ID)
}

// joinMQTT is Join over MQTT (PROTOCOL §4.4): a new Thing, or one whose
// requester does not hold its credential, is issued one.
func (a *Admission) joinMQTT(ctx context.Context, r *JoinRequest) (JoinResult, error) {
	v, err := a.admitJoin(r)
	if errors.Is(err, errJoinPending) {
		return a.parkJoin(r)
	}
	if err != nil {
		return JoinResult{}, err
	}
	if r.Deregister {
		if err := a.deregister(ctx, r.ID); err != nil {
			return JoinResult{}, err
		}
		return JoinResult{Status: lmos.JoinDeleted, ID: r.ID}, nil
	}
	p, err := a.prepare(r)
	if err != nil {
		return JoinResult{}, err
	}
	// Only the holder of the Thing's credential writes as its owner: an
	// anonymous join of a registered Thing may not bind it to a key
	// (PROTOCOL §6).
	origin := Origin{Source: SourceMQTT, Owner: v.Credentialed}
	res := JoinResult{Status: lmos.JoinAccepted, ID: r.ID, ByKey: v.ByKey, TD: p.raw}
	var hash string
	if !v.Credentialed {
		fresh, err := a.checkClaim(r.ID, r.Addr)
		if err != nil {
			return JoinResult{}, err
		}
		// Its stored description is public: only a proof newer than the
		// last accepted one takes a registered bound Thing (PROTOCOL §6).
		origin.Takeover = fresh
		// A new Thing, or one without credentials: written anonymously,
		// it counts against its address (registry.maxThingsPerSource),
		// and gets a credential, stored in the same commit.
		origin.Addr = r.Addr
		secret, err := newCredential()
		if err != nil {
			a.reg.log.Error("cannot issue mqtt credential", "id", r.ID, "err", err)
			return JoinResult{}, &Error{Code: EINTERNAL, Message: "the Thing's credentials could not be created, so it was not registered; publish the description again", Err: err}
		}
		hash, res.Password = HashToken(secret), secret
	}
	if v.ByKey {
		// A new credential replaces the one the agent lost, which stops
		// working (its connections end), in the commit of a fresh proof.
		res.Created, err = a.registerByKey(ctx, r.ID, p, origin, hash)
	} else {
		res.Created, err = a.register(ctx, r.ID, p, origin, hash)
	}
	if err != nil {
		return JoinResult{}, err
	}
	return res, nil
}

// checkClaim refuses an anonymous join of a registered Thing that holds no
// credential (an admin approved its join while its agent was gone, or
// reset its credential) from another host than the one it was last
// written from (the exact address, not its IPv6 /64, which a whole home LAN
// shares), unless its id is bound to a key: the credential the
// join issues would hand anyone on the LAN the Thing with its admission and
// its groups (PROTOCOL §6). A bound one is taken only by a fresh proof by
// its key (fresh: the write is a takeover), not by its stored description,
// which anyone may read and send again. The MQTT door runs the joins of
// one Thing one at a time, so the Thing cannot change before the write.
func (a *Admission) checkClaim(id, remote string) (fresh bool, err error) {
	th, err := a.reg.Get(id)
	if err != nil {
		return false, nil // a new Thing; a failed read fails the write too
	}
	if _, err := a.reg.Binding(id); err == nil || th.IsMirror() {
		// A mirror is taken only by its agent's key (claimMirror).
		return true, nil
	}
	if th.Meta.WrittenFrom(remote) {
		return false, nil
	}
	return false, Errorf(EFORBIDDEN, "the Thing %q holds no credentials and was registered from another address: its agent joins again from the exact address it was registered from, or an admin deletes it or binds it to the agent's key (PUT /api/things/{id}/binding)", id)
}

// joinAgent is Join over WebSocket (PROTOCOL §5): the agent stays
// connected, and no credential is issued.
func (a *Admission) joinAgent(ctx context.Context, r *JoinRequest) (JoinResult, error) {
	v, err := a.admitJoin(r)
	if errors.Is(err, errJoinPending) {
		return a.parkJoin(r)
	}
	if err != nil {
		return JoinResult{}, err
	}
	p, err := a.prepare(r)
	if err != nil {
		return JoinResult{}, err
	}
	origin := Origin{Source: SourceWS, Addr: r.Addr, Takeover: r.Takeover, Owner: r.Owner}
	res := JoinResult{Status: lmos.JoinAccepted, ID: r.ID, ByKey: v.ByKey, TD: p.raw}
	if v.ByKey {
		// Its MQTT credential goes in the same commit: the Thing is the
		// WebSocket agent's now.
		res.Created, err = a.registerByKey(ctx, r.ID, p, origin, "")
	} else {
		res.Created, err = a.register(ctx, r.ID, p, origin, "")
	}
	if err != nil {
		return JoinResult{}, err
	}
	return res, nil
}

// joinDiscovered is Join of a Thing the hub found on the LAN itself
// (mDNS): the join mode decides on a new one (approve parks it with nobody
// waiting); a registered one is resumed only from its own instance
// (r.Owner) or the exact address it was registered from, not by another
// host of its IPv6 /64, which a home LAN shares: another instance's TD, or
// the stored one replayed from the directory, would take an admitted
// Thing over. Nobody is rate-limited here: the registrar bounds its own
// fetches.
func (a *Admission) joinDiscovered(ctx context.Context, r *JoinRequest) (JoinResult, error) {
	p, err := a.prepare(r)
	if err != nil {
		return JoinResult{}, err
	}
	if r.ID == "" {
		r.ID = p.ID()
	}
	// Anyone on the LAN can announce: the TD's host is an anonymous
	// source (registry.maxThingsPerSource).
	origin := Origin{Source: SourceMDNS, Addr: r.Addr}
	th, err := a.reg.Get(r.ID)
	switch ErrorCode(err) {
	case "":
		if th.Meta.Origin.Source != SourceMDNS {
			return JoinResult{}, Errorf(EFORBIDDEN, "it is registered by other means (%s)", th.Meta.Origin.Source)
		}
		if !r.Owner && !th.Meta.WrittenFrom(r.Addr) {
			return JoinResult{}, Errorf(EFORBIDDEN, "the Thing was registered from another address than %s; it comes back from there, or registers anew once an admin deleted it or mdns.forgetAfter removed it", r.Addr)
		}
		// The Thing's own instance: it may bind the id to a key (PROTOCOL §6).
		origin.Owner = true
	case ENOTFOUND:
		switch a.joinMode() {
		case "closed":
			return JoinResult{}, Errorf(EFORBIDDEN, "joining is closed on this hub")
		case "approve":
			return a.parkJoin(r)
		}
	default:
		return JoinResult{}, err
	}
	res := JoinResult{Status: lmos.JoinAccepted, ID: r.ID, TD: p.raw}
	if stored, _ := a.reg.Raw(r.ID); stored != nil && bytes.Equal(stored, p.raw) {
		res.Unchanged = true
		return res, nil
	}
	if err := ValidateID(r.ID); err != nil {
		return JoinResult{}, err
	}
	res.Created, err = a.reg.putPrepared(ctx, r.ID, p, origin, Precondition{})
	if err != nil {
		return JoinResult{}, err
	}
	return res, nil
}

// parkJoin puts the join of a new Thing on the pending list (join mode
// approve): only a valid description is parked. An MQTT waiter is issued
// its credential when the join is approved.
func (a *Admission) parkJoin(r *JoinRequest) (JoinResult, error) {
	res := JoinResult{Status: lmos.JoinPending, ID: r.ID, Approval: true}
	p, err := a.prepare(r)
	if err != nil {
		return res, err
	}
	w := r.Waiter
	if w != nil && r.Door == SourceMQTT && w.Credential == nil {
		w.Credential = newCredential
	}
	if err := a.park(r.ID, p, r.Door, r.Addr, w); err != nil {
		return res, err
	}
	res.TD = p.raw
	return res, nil
}

// newCredential returns a 256-bit password, base64url without padding.
func newCredential() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("cannot create secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// prepareMedia is prepareFrom for a description in contentType: a CBOR one
// is decoded once, with the wire's limits for hostile input, into the
// document the hub validates, and stored as its JSON form.
func (r *Registry) prepareMedia(payload []byte, contentType, from string) (*PreparedTD, error) {
	if lmos.MediaOf(contentType) != lmos.MediaCBOR {
		return r.prepareFrom(payload, from)
	}
	if err := r.checkSize(len(payload)); err != nil {
		return nil, err
	}
	v, err := r.Decoder().DecodeValue(payload, contentType)
	if err != nil {
		return nil, err
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, &Error{Code: EINVALID, Message: "a Thing Description must be a CBOR map with text keys",
			Fields: []FieldError{{Field: "", Description: "must be a map with text keys"}}}
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		// NaN, infinities and other values JSON cannot carry.
		return nil, Errorf(EINVALID, "the CBOR document has no JSON equivalent: %v", err)
	}
	return r.prepareDecoded(doc, raw, from)
}

// prepareDecoded is prepareFrom for a description a door decoded into doc,
// raw being its JSON form, which is stored: its size and nesting are
// bounded as a JSON description's, and doc becomes what parsing raw gives.
func (r *Registry) prepareDecoded(doc map[string]any, raw []byte, from string) (*PreparedTD, error) {
	if err := r.checkSize(len(raw)); err != nil {
		return nil, err
	}
	if err := checkDepthLimit(raw, r.opts.MaxDepth); err != nil {
		return nil, err
	}
	if err := jsonLeaves(doc); err != nil {
		return nil, err
	}
	return r.prepareParsed(raw, doc, from)
}

// jsonLeaves turns the values of a decoded CBOR document that JSON writes
// otherwise (integers, floats, big integers, byte strings) into what
// parsing its JSON form gives (json.Number, base64 text), in place: the
// document validated and summarised is the one stored.
func jsonLeaves(v any) error {
	fix := func(x any) (any, error) {
		switch x.(type) {
		case nil, bool, string, map[string]any, []any:
			return x, jsonLeaves(x)
		}
		b, err := json.Marshal(x)
		if err != nil {
			return nil, Errorf(EINVALID, "the CBOR document has no JSON equivalent: %v", err)
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var out any
		if err := d.Decode(&out); err != nil {
			return nil, Errorf(EINVALID, "the CBOR document has no JSON equivalent: %v", err)
		}
		return out, nil
	}
	var err error
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if x[k], err = fix(e); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if x[i], err = fix(e); err != nil {
				return err
			}
		}
	}
	return nil
}
