package hub

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/ratelimit"
)

// Defaults of the anonymous join rate per source (NewAdmission).
const (
	DefaultJoinRate  = 20  // new Things per second and source
	DefaultJoinBurst = 100 // a source's burst: a gateway bringing up its agents at once
)

// Admission is the join policy of the doors where Things register
// themselves (MQTT joins, WebSocket registerThing; PROTOCOL §4.4, §5): the
// join mode, who may replace or deregister a Thing, the rate of anonymous
// joins per source, and the write of a joined Thing together with the
// credential it is issued. One Admission serves every door, so the rules
// and the rate budget are the same wherever a Thing knocks.
type Admission struct {
	mode  string
	reg   *Registry
	creds CredentialStore // nil: no door issues credentials
	rate  *ratelimit.Limiter
	// pending is the join-approval state: the parked joins and the
	// permit-join window (pending.go).
	pending pendingList

	revokeMu  sync.Mutex
	onRevoked []func(id string) // OnCredentialRevoked

	obs Observer     // nil: none (SetObserver)
	log *slog.Logger // joins at info (SetLogger); nil: none
	// refusedLog holds back refused joins' lines beyond one per source
	// address a minute.
	refusedLog *ratelimit.Throttle
}

// NewAdmission returns the join policy for mode (open, approve or closed;
// "" is open). rate and burst bound anonymous joins of new Things per
// source: 0 takes the defaults, a negative rate disables the limit.
func NewAdmission(reg *Registry, creds CredentialStore, mode string, rate float64, burst int) (*Admission, error) {
	switch mode {
	case "":
		mode = "open"
	case "open", "approve", "closed":
	default:
		return nil, fmt.Errorf("unknown join mode %q", mode)
	}
	if rate == 0 {
		rate = DefaultJoinRate
	}
	if burst <= 0 {
		burst = DefaultJoinBurst
	}
	a := &Admission{mode: mode, reg: reg, creds: creds, rate: ratelimit.New(max(rate, 0), burst, nil),
		refusedLog: ratelimit.NewThrottle(RefusalLogPeriod, reg.opts.Now)}
	a.pending.now = reg.opts.Now
	a.pending.init()
	return a, nil
}

// Mode is the join mode: open, approve or closed.
func (a *Admission) Mode() string { return a.mode }

// checkJoinMode says whether a new Thing may join on its own (over MQTT or
// WebSocket) under join mode (PROTOCOL §4.4): nil for open (and "") and
// for approve, which parks the join later (errJoinPending), a forbidden
// error for closed.
func checkJoinMode(mode string) error {
	switch mode {
	case "", "open", "approve":
		return nil
	case "closed":
		return Errorf(EFORBIDDEN, "joining is closed on this hub")
	}
	return Errorf(EINTERNAL, "unknown join mode %q", mode)
}

// JoinRequest is one Thing asking a door to register, replace or
// deregister it (Admission.Join).
type JoinRequest struct {
	ID   string
	Door Source // SourceMQTT, SourceWS or SourceMDNS
	// Holder says the requester is authenticated with the Thing's own
	// credential (an MQTT connection whose username is the Thing).
	Holder bool
	// Deregister asks for the Thing's removal instead of a registration.
	Deregister bool
	// Addr is the requester's address: the anonymous join rate, the
	// per-source quota and the proof's verification count by it.
	Addr string
	// TD is the description as the door received it, in ContentType (JSON
	// when empty, or CBOR): decoded once, by the hub. Empty with
	// Deregister.
	TD          []byte
	ContentType string
	// Doc, when not nil, is TD as the door decoded it into the JSON data
	// model, TD being its JSON form (a WebSocket message's td member): the
	// hub validates it without parsing TD again.
	Doc map[string]any
	// Owner says the requester is the Thing's own: the live WebSocket
	// connection that created it or proved its key, the mDNS instance
	// that announced it (Origin.Owner).
	Owner bool
	// Takeover says a WebSocket registration comes from another
	// connection than the Thing's live one: a bound id needs a fresh
	// proof (Origin.Takeover).
	Takeover bool
	// Waiter is told the decision on a join parked for approval; nil:
	// nobody waits (mDNS). Join gives an MQTT waiter its Credential.
	Waiter *JoinWaiter

	// The description prepared (PrepareJoin, or when first needed).
	prep     *PreparedTD
	prepErr  error
	prepared bool
}

// verdict is what the join policy decided about a request it admitted.
type verdict struct {
	// Credentialed says the Thing holds a credential and the requester
	// presented it (JoinRequest.Holder): no new one is issued.
	Credentialed bool
	// ByKey says the Thing holds a credential the requester did not
	// present, and the description is signed by the key its id is bound
	// to instead: it is written with registerByKey, which replaces the
	// credential (the one the agent lost stops working) and requires the
	// proof to be fresh (the replay rule).
	ByKey bool
}

// admitJoin applies the join policy to r: the requester presented the
// Thing's credential (verdict.Credentialed: a member joined over MQTT,
// admitted for its Holder), or the request is admitted under the join mode
// and the rate, or a Thing holding a credential whose requester does not
// present it is admitted because the description is signed by the key its
// id is bound to (verdict.ByKey).
//
// The order of the checks is part of the wire contract: over MQTT the join
// mode decides first, so a closed hub tells an anonymous client nothing
// about which ids exist; over WebSocket a Thing registered over WebSocket
// may come back (its agent reconnecting) whatever the mode.
func (a *Admission) admitJoin(r *JoinRequest) (verdict, error) {
	held, err := a.HasCredential(r.ID)
	if err != nil {
		return verdict{}, err
	}
	if held {
		if r.Holder {
			return verdict{Credentialed: true}, a.admitReturning(r)
		}
		if !r.Deregister && (len(r.TD) > 0 || r.Doc != nil || r.prepared) {
			byKey, err := a.provenByKey(r)
			if err != nil {
				return verdict{}, err
			}
			if byKey {
				return verdict{ByKey: true}, a.admitReturning(r)
			}
		}
		if r.Deregister {
			return verdict{Credentialed: true}, Errorf(EFORBIDDEN, "the Thing %q has joined over MQTT with credentials: only a client connected with them may deregister it", r.ID)
		}
		return verdict{Credentialed: true}, Errorf(EFORBIDDEN, "the Thing %q has joined over MQTT with credentials: only a client connected with them, "+
			"or a description signed by the key the id is bound to, may replace its description. An agent that lost its credentials: "+
			"keep them (the agent library's Options.StateDir), or have an admin reset them (lmos-hub things reset-credential ID, "+
			"DELETE /api/things/{id}/credential) so that its next join is a new one", r.ID)
	}
	credentialed, err := a.admitAnonymous(r)
	return verdict{Credentialed: credentialed}, err
}

// provenByKey reports whether r's description is signed by the key r.ID
// is bound to. Whether the proof is fresh is decided in the write loop
// (registerByKey), against the binding as it is then. A proof that does not
// verify is refused as such; an id bound to no key proves nothing (its
// first binding is no proof of a Thing that exists).
func (a *Admission) provenByKey(r *JoinRequest) (bool, error) {
	b, err := a.reg.Binding(r.ID)
	if ErrorCode(err) == ENOTFOUND {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	p, err := a.prepare(r)
	if err != nil {
		return false, err
	}
	return p.signer != nil && p.signer.DID == b.DID, nil
}

// admitAnonymous is admitJoin for a Thing that holds no credential.
func (a *Admission) admitAnonymous(r *JoinRequest) (credentialed bool, err error) {
	if r.Door == SourceWS {
		return false, a.admitAgent(r)
	}
	mode := a.joinMode()
	if err := checkJoinMode(mode); err != nil {
		return false, err
	}
	registered, err := a.notOtherMeans(r)
	if err != nil {
		return false, err
	}
	if r.Deregister {
		return false, Errorf(ENOTFOUND, "the Thing %q is not registered", r.ID)
	}
	if err := a.allow(r.Addr); err != nil {
		return false, err
	}
	if mode == "approve" && !registered {
		return false, errJoinPending
	}
	return false, nil
}

// admitReturning is admitJoin for the holder of id's credential: a
// registered member updates itself and any holder deregisters, whatever
// the join mode; a holder whose Thing is gone (deleted over HTTP or by
// expiry: the credential stays) joins as a new Thing does, so that under
// approve or closed an admin's deletion evicts it (PROTOCOL §4.4).
func (a *Admission) admitReturning(r *JoinRequest) error {
	if r.Deregister {
		return nil
	}
	switch _, err := a.reg.Get(r.ID); ErrorCode(err) {
	case "":
		return nil
	case ENOTFOUND:
	default:
		return err
	}
	mode := a.joinMode()
	if err := checkJoinMode(mode); err != nil {
		return err
	}
	if mode == "approve" {
		return errJoinPending
	}
	return nil
}

// admitAgent is admitJoin for a Thing without a credential at a door whose
// agents stay connected (WebSocket): the Thing's own door may resume it.
func (a *Admission) admitAgent(r *JoinRequest) error {
	t, err := a.reg.Get(r.ID)
	switch ErrorCode(err) {
	case "":
		if t.Meta.Origin.Source == r.Door {
			return nil // an agent coming back (or updating itself)
		}
		if t.IsMirror() {
			return a.claimMirror(r, &t)
		}
		return otherMeans(r.ID, t.Meta.Origin.Source, r.Door)
	case ENOTFOUND:
	default:
		return err
	}
	mode := a.joinMode()
	if err := checkJoinMode(mode); err != nil {
		return err
	}
	if err := a.allow(r.Addr); err != nil {
		return err
	}
	if mode == "approve" {
		return errJoinPending
	}
	return nil
}

// notOtherMeans refuses an anonymous request for a Thing registered by
// other means (HTTP, mDNS, sync, another door): it holds no credential, and
// an anonymous join must not take it over. The one exception is a Thing
// registered over MQTT without a credential: a join approved while its
// agent was no longer waiting (Admission.Approve), whose agent's next
// join takes it and gets the credential. registered reports that the
// Thing exists (so its join is no new one to approve).
func (a *Admission) notOtherMeans(r *JoinRequest) (registered bool, err error) {
	t, err := a.reg.Get(r.ID)
	switch ErrorCode(err) {
	case "":
		if t.Meta.Origin.Source == SourceMQTT && r.Door == SourceMQTT && !r.Deregister {
			return true, nil
		}
		if t.IsMirror() && !r.Deregister {
			return true, a.claimMirror(r, &t)
		}
		if t.IsMirror() {
			return true, MirrorReadOnly(r.ID, t.Meta.Origin.Hub)
		}
		return true, otherMeans(r.ID, t.Meta.Origin.Source, r.Door)
	case ENOTFOUND:
		return false, nil
	}
	return false, err
}

// claimMirror admits the join of the mirrored Thing t by its own agent
// alone: one whose description is signed by the key its id is bound to
// (or, bound to none here, by the key its copy was verified by). The
// agent moved here; anyone else is refused, the mirror being read-only.
// The write loop decides again on the state it commits to.
func (a *Admission) claimMirror(r *JoinRequest, t *Thing) error {
	p, err := a.prepare(r)
	if err != nil {
		return err
	}
	want := t.Meta.Verified
	if b, err := a.reg.Binding(r.ID); err == nil {
		want = b.DID
	}
	if p.signer != nil && want != "" && p.signer.DID == want {
		return nil
	}
	return MirrorReadOnly(r.ID, t.Meta.Origin.Hub)
}

func otherMeans(id string, by, door Source) error {
	return Errorf(EFORBIDDEN, "the Thing %q is registered by other means (%s): it cannot be replaced or deregistered over %s", id, by, doorName(door))
}

func doorName(door Source) string {
	switch door {
	case SourceMQTT:
		return "MQTT"
	case SourceWS:
		return "WebSocket"
	}
	return string(door)
}

// allow spends one anonymous join of a new Thing from addr: each costs
// durable writes, so one address may ask only so fast.
func (a *Admission) allow(addr string) error {
	if ok, wait := a.rate.Allow(SourceOf(addr)); !ok {
		return Errorf(ERATELIMIT, "too many new Things join from this address; retry in %s", wait.Round(time.Millisecond))
	}
	return nil
}

// HasCredential reports whether the Thing id holds a credential: a member
// joined over MQTT.
func (a *Admission) HasCredential(id string) (bool, error) {
	if a.creds == nil {
		return false, nil
	}
	_, err := a.creds.CredentialHash(id)
	switch ErrorCode(err) {
	case "":
		return true, nil
	case ENOTFOUND:
		return false, nil
	}
	return false, &Error{Code: EINTERNAL, Message: "cannot read the Thing's credential", Err: err}
}

// registerByKey writes a Thing admitted by its bound key's proof
// (verdict.ByKey) and, in the same durable commit, replaces its credential
// with credHash (a door that issues credentials: MQTT) or deletes it
// ("": a door that issues none, WebSocket). The proof must be fresh, newer
// than the last one accepted (the replay rule, PROTOCOL §6): the stored
// description, which anyone may read, sent again is refused. Then the
// connections authenticated with the old credential are ended
// (OnCredentialRevoked).
func (a *Admission) registerByKey(ctx context.Context, id string, p *PreparedTD, origin Origin, credHash string) (bool, error) {
	if err := ValidateID(id); err != nil {
		return false, err
	}
	origin.Takeover = true // the proof must be fresh
	origin.Admitted = a.mode != "open"
	created, err := a.reg.putPreparedWithCred(ctx, id, p, origin, Precondition{}, credHash, credHash == "")
	if err != nil {
		return false, err
	}
	a.revoked(id)
	return created, nil
}

// ResetCredential deletes the credential of the Thing id at an admin's
// request (ENOTFOUND when it holds none) and ends the connections
// authenticated with it. The Thing stays registered, with its key binding
// and memberships; its agent's next join is that of a Thing without a
// credential (Join): refused while joining is closed, and otherwise
// issued a new credential.
func (a *Admission) ResetCredential(ctx context.Context, id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	held, err := a.HasCredential(id)
	if err != nil {
		return err
	}
	if !held {
		return Errorf(ENOTFOUND, "the Thing %q holds no MQTT credential", id)
	}
	if err := a.reg.submit(ctx, &op{kind: opDropCred, id: id, dropCred: true}).err; err != nil {
		return err
	}
	a.revoked(id)
	return nil
}

// OnCredentialRevoked registers f, called with a Thing's id once its
// credential was replaced or deleted (a join by its key, ResetCredential): a
// door ends the connections still authenticated with the old one.
func (a *Admission) OnCredentialRevoked(f func(id string)) {
	a.revokeMu.Lock()
	defer a.revokeMu.Unlock()
	a.onRevoked = append(a.onRevoked, f)
}

func (a *Admission) revoked(id string) {
	a.revokeMu.Lock()
	fs := slices.Clone(a.onRevoked)
	a.revokeMu.Unlock()
	for _, f := range fs {
		f(id)
	}
}

// register writes an admitted Thing. credHash, when not empty, is the hash
// of the credential issued with the join: it is stored in the same durable
// commit as the description, so a Thing is never left registered without
// the credential its agent was given, nor a credential without its Thing.
func (a *Admission) register(ctx context.Context, id string, p *PreparedTD, origin Origin, credHash string) (bool, error) {
	if err := ValidateID(id); err != nil {
		return false, err
	}
	// A new Thing that joins while the configured mode is approve or
	// closed came through an admin's permit window: the hub picked it.
	// Under open it picked itself (ThingMeta.Admitted).
	origin.Admitted = a.mode != "open"
	return a.reg.putPreparedWith(ctx, id, p, origin, Precondition{}, credHash)
}

// deregister deletes the Thing id at the request of its credential's holder
// (admitted by admitJoin), and the credential in the same durable commit, so no
// failure or crash leaves a credential whose Thing its holder deregistered,
// nor the reverse. A credential whose Thing is already gone (deleted over
// HTTP or by expiry, which keep it: PROTOCOL §4.4) is deleted alone; the
// Thing's absence is then no error.
func (a *Admission) deregister(ctx context.Context, id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	return a.reg.submit(ctx, &op{kind: opDelete, id: id, dropCred: true}).err
}

// CredentialStore keeps the MQTT credentials the hub issues to joined
// Things: only the SHA-256 of each password, as for admin tokens.
type CredentialStore interface {
	// PutCredential stores the password hash for a Thing id (replacing any).
	PutCredential(thingID, hash string) error
	// CredentialHash returns the stored hash, or ENOTFOUND.
	CredentialHash(thingID string) (string, error)
}
