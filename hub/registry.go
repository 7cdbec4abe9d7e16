package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
	"github.com/eclipse-lmos/lmos-hub/internal/ratelimit"
	"github.com/eclipse-lmos/lmos-hub/internal/tdindex"
	"github.com/google/uuid"
)

// RegistryOptions tune a Registry; the zero value is usable.
type RegistryOptions struct {
	// Now is the clock (time.Now when nil); tests move it.
	Now func() time.Time
	// Logger receives the registry's logs (slog.Default when nil).
	Logger *slog.Logger
	// MaxBatch caps how many writes share one durable commit (default 256).
	MaxBatch int
	// MaxThings caps the number of registered Things (0 = unlimited).
	MaxThings int
	// MaxDepth caps how deep a Thing Description nests, on every door
	// (registry.maxDepth; default DefaultMaxDepth); payloads may nest a
	// little deeper. Doors decode with Registry.Decoder.
	MaxDepth int
	// MaxTDBytes caps one stored Thing Description, on every door and
	// after a merge patch (default DefaultMaxTDBytes).
	MaxTDBytes int
	// MaxBytes caps the stored documents' total size (0 = unlimited).
	MaxBytes int64
	// MaxThingsPerSource caps the Things written anonymously from one
	// address (Origin.Addr); authenticated writers are not counted
	// (0 = unlimited).
	MaxThingsPerSource int
	// SubscriberBuffer is each change-feed subscriber's queue length (default 256).
	// A subscriber that falls this far behind is dropped and must resubscribe
	// with its last sequence, so a slow reader never slows writers.
	SubscriberBuffer int
	// Search bounds each search's cost (zero values take the defaults).
	Search SearchLimits
	// Security are the proof rules (hub/binding.go).
	Security SecurityOptions
	// Issuer signs group membership credentials (nil: none are issued).
	Issuer MembershipIssuer
	// Memberships pace and bound membership credentials
	// (hub/statusentries.go).
	Memberships MembershipLimits
}

// Registry holds the registered Things in memory (their metadata and a
// compact Summary of each document, for fast reads and search) and in a
// Store (durably, with the documents). All writes go through one loop that
// groups concurrent writes into a single durable commit, assigns change-feed
// sequence numbers in commit order and publishes events in that order.
type Registry struct {
	store Store
	opts  RegistryOptions
	log   *slog.Logger

	mu     sync.RWMutex
	things map[string]*Thing
	ids    []string // sorted ids of things
	// rev is the sequence of the last committed directory change that
	// things reflects; set with things, so a reader under mu sees both
	// from one state.
	rev uint64
	// installed is closed (and replaced) by every install, so a reader
	// that found the store ahead of the index can wait for the index.
	installed chan struct{}
	// expiring counts things with an expiry, so List can skip expiry checks
	// when there are none.
	expiring int

	ops  chan *op
	quit chan struct{}
	done chan struct{}
	once sync.Once

	// Owned by the write loop.
	seq    uint64
	expiry expiryQueue
	// purgeBackoff delays purges after a failed commit (wall clock).
	purgeBackoff time.Time
	overlay      map[string]*Thing
	// batchDocs are the documents the batch being applied wrote, by id.
	batchDocs map[string]map[string]any
	// totalBytes is the stored documents' size and bySource the Things
	// each anonymous address wrote, both counting unpurged expired
	// Things (they hold their space until purged); undo reverts the
	// changes of a batch whose commit failed.
	totalBytes int64
	bySource   map[string]int
	undo       []func()
	// batchRaws are the submitted bytes the batch being applied wrote, by
	// id: a conditional write later in the batch compares their version.
	batchRaws map[string][]byte

	feedMu    sync.Mutex
	published uint64
	subs      map[*Subscription]struct{}
	search    *searchGate
	closed    bool
	// searchIndex makes and reads the Things' summaries (its word dictionary
	// is this registry's).
	searchIndex *tdindex.Index

	// bindings are the key bindings by id (under mu); bindOverlay their
	// changes in the batch being applied (nil: removed), owned by the
	// write loop.
	bindings    map[string]*Binding
	bindOverlay map[string]*Binding
	// groups are the agent groups by id and status the credential status
	// list (under mu); groupOverlay (nil: dissolved), statusOverlay and
	// membershipChanges are the batch's changes, owned by the write loop.
	groups            map[string]*Group
	groupsGen         uint64 // moves with every change of groups (GroupsSnapshot)
	status            StatusList
	groupOverlay      map[string]*Group
	statusOverlay     *StatusList
	membershipChanges []MembershipChange
	// credChanges are the batch's membership credentials issued and
	// dropped, in order (Batch.MemberCredentials); listURLs shares the
	// members' status list URLs (internList). Both owned by the write loop.
	credChanges     []MemberCredential
	listURLs        map[string]string
	membershipFns   []func(MembershipChange)
	membershipBatch uint64 // the write loop's alone
	// verifyLimit bounds proof verifications per client source.
	verifyLimit *ratelimit.Limiter
	// sigs checks every proof's signature, in batches under load.
	sigs sigBatcher
	// selfJoins remembers accepted self-join statements (groupjoin.go).
	selfJoins statementLog
	// renewals keeps credentials renewed on read (credential.go).
	renewals renewalCache
	// issuePacer paces credentials per manager and source
	// (statusentries.go).
	issuePacer issuePacer
}

type opKind int

const (
	opPut opKind = iota
	opCreate
	opPatch
	opDelete
	opExpire
	opPresence
	opBind
	opGroup
	// opDropCred deletes a Thing's credential alone
	// (Admission.ResetCredential).
	opDropCred
)

type op struct {
	kind opKind
	id   string
	raw  []byte
	doc  map[string]any
	sum  *Summary
	// sumEnc is sum encoded for the store.
	sumEnc []byte
	patch  map[string]any
	origin Origin
	// expires is the expiry an opExpire was scheduled for; a Thing refreshed
	// since then is left alone.
	expires time.Time
	// presence is the new status of an opPresence.
	presence string
	// cond is checked against the current version in the write loop, so
	// no other write can come between the check and this one.
	cond Precondition
	// credHash is the hash of a credential issued by a join, committed
	// with the description (Registry.putJoined).
	credHash string
	// dropCred deletes the Thing's credential in the commit of an
	// opDelete (a deregistration or an undone join), an opPut (a join by its key)
	// or an opDropCred.
	dropCred bool
	// dropPending deletes the Thing's pending join in the commit of an
	// opPut (Admission.Approve).
	dropPending bool
	// signer is the verified proof of the document (nil: unsigned); admin
	// says an admin token wrote it (hub/binding.go).
	signer *Signer
	admin  bool
	// byProof: the writer is authenticated by the proof alone.
	byProof bool
	// bindDID is the DID an opBind binds the id to ("" removes it).
	bindDID string
	// group is what an opGroup does (hub/group.go).
	group *groupOp
	// mirror: an opPut of a remote directory's copy (Registry.Mirror),
	// whose presence is presence and expiry mirrorExpires; unmirror: an
	// opDelete of the mirror from that directory only (hub/mirror.go).
	mirror        bool
	mirrorExpires time.Time
	unmirror      string
	done          chan opResult
}

type opResult struct {
	created bool
	err     error
}

// NewRegistry loads every stored Thing and starts the write loop.
func NewRegistry(store Store, opts RegistryOptions) (*Registry, error) {
	opts = opts.withDefaults()
	r := &Registry{
		store:    store,
		opts:     opts,
		log:      opts.Logger,
		things:   make(map[string]*Thing),
		ops:      make(chan *op, opts.MaxBatch),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
		subs:     make(map[*Subscription]struct{}),
		bySource: make(map[string]int),
		search:   newSearchGate(opts.Search),
		bindings: make(map[string]*Binding),
		groups:   make(map[string]*Group),
	}
	r.searchIndex = tdindex.New()
	r.verifyLimit = newVerifyLimiter(opts.Security, nil)
	r.selfJoins.since = opts.Now()
	if err := r.loadBindings(); err != nil {
		return nil, fmt.Errorf("cannot load key bindings: %w", err)
	}
	if err := r.loadGroups(); err != nil {
		return nil, fmt.Errorf("cannot load groups: %w", err)
	}
	recs, sums, err := r.loadStored()
	if err != nil {
		return nil, err
	}
	sizes, err := r.storedSizes(recs, sums)
	if err != nil {
		return nil, err
	}
	r.index(recs, sums, sizes)
	if r.seq, err = store.LastSeq(); err != nil {
		return nil, fmt.Errorf("cannot read last event sequence: %w", err)
	}
	r.published = r.seq
	r.rev = r.seq
	r.installed = make(chan struct{})
	go r.loop()
	if ci := r.credentialIssuer(); ci != nil {
		go r.renewLoop(ci)
	}
	return r, nil
}

// Decoder is how every door parses documents and decodes payloads: with
// the registry's nesting limit (RegistryOptions.MaxDepth).
func (r *Registry) Decoder() Decoder { return Decoder{MaxDepth: r.opts.MaxDepth} }

// withDefaults fills in the options left at zero.
func (opts RegistryOptions) withDefaults() RegistryOptions {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = DefaultMaxDepth
	}
	if opts.SubscriberBuffer <= 0 {
		opts.SubscriberBuffer = 256
	}
	if opts.MaxTDBytes <= 0 {
		opts.MaxTDBytes = DefaultMaxTDBytes
	}
	opts.Security = opts.Security.withDefaults()
	return opts
}

// loadStored reads every stored Thing and its summary: sums[i] belongs to
// recs[i], nil when the Thing has none usable and cannot be summarised
// (it is then left out of the index). The records keep only ID and Meta.
func (r *Registry) loadStored() (recs []ThingRecord, sums []*Summary, err error) {
	// A stored summary is decoded as it comes, so start-up holds each
	// encoding only briefly: memory at start is the summaries', never the
	// documents'. recs gets the raw document only of a Thing without a
	// usable stored summary.
	if err := r.store.LoadThings(func(rec ThingRecord) error {
		if s, err := r.decodeSummary(rec.Summary); err == nil {
			recs, sums = append(recs, ThingRecord{ID: rec.ID, Meta: rec.Meta}), append(sums, s)
			return nil
		}
		recs, sums = append(recs, rec), append(sums, nil)
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("cannot load things: %w", err)
	}
	// A Thing without a usable summary (stored by an older version) is
	// parsed, which is nearly all of start-up time then: use every core.
	var wg sync.WaitGroup
	workers := max(1, min(runtime.GOMAXPROCS(0), len(recs)/256))
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(recs); i += workers {
				if sums[i] == nil {
					sums[i] = r.loadSummary(recs[i])
				}
				recs[i].Raw, recs[i].Summary = nil, nil
			}
		})
	}
	wg.Wait()
	return recs, sums, nil
}

// storedSizes reads the size of each loaded Thing stored before sizes
// were, from the store's pages without copying the document: the quotas
// need it.
func (r *Registry) storedSizes(recs []ThingRecord, sums []*Summary) (map[string]int64, error) {
	var unsized []string
	for i, rec := range recs {
		if sums[i] != nil && rec.Meta.Size == 0 {
			unsized = append(unsized, rec.ID)
		}
	}
	sizes := make(map[string]int64, len(unsized))
	if len(unsized) > 0 {
		if err := r.store.ThingsRaw(unsized, func(id string, raw []byte) error {
			sizes[id] = int64(len(raw))
			return nil
		}); err != nil {
			return nil, fmt.Errorf("cannot read stored document sizes: %w", err)
		}
	}
	return sizes, nil
}

// index builds the in-memory index of the loaded Things: the map, the
// sorted ids, the byte and per-source totals and the expiry queue.
func (r *Registry) index(recs []ThingRecord, sums []*Summary, sizes map[string]int64) {
	// Sized once: grown by append, the ids would keep up to a quarter
	// more room than they use.
	r.things = make(map[string]*Thing, len(recs))
	r.ids = make([]string, 0, len(recs))
	for i, rec := range recs {
		if sums[i] == nil {
			continue
		}
		if rec.Meta.Size == 0 {
			rec.Meta.Size = sizes[rec.ID]
		}
		internMeta(&rec.Meta)
		t := &Thing{ID: rec.ID, Summary: sums[i], Meta: rec.Meta}
		r.things[rec.ID] = t
		r.ids = append(r.ids, rec.ID)
		r.totalBytes += t.Meta.Size
		if t.Meta.Anon != "" {
			r.bySource[t.Meta.Anon]++
		}
		if !t.Meta.Expires.IsZero() {
			r.expiry.set(t.ID, t.Meta.Expires)
			r.expiring++
		}
	}
	slices.Sort(r.ids)
}

// internMeta points the loaded metadata's strings that take a few known
// values at the hub's constants: decoded, each Thing would hold copies of
// its own.
func internMeta(m *ThingMeta) {
	m.Origin.Source = internSource(m.Origin.Source)
	m.Presence.Via = internSource(m.Presence.Via)
	for _, v := range []string{PresenceOnline, PresenceOffline, PresenceUnknown} {
		if m.Presence.Status == v {
			m.Presence.Status = v
		}
	}
}

func internSource(s Source) Source {
	for _, v := range []Source{SourceHTTP, SourceMQTT, SourceWS, SourceMDNS, SourceRemote} {
		if s == v {
			return v
		}
	}
	return s
}

// loadSummary decodes the stored summary of rec, or rebuilds it from the
// document; nil when neither works.
func (r *Registry) loadSummary(rec ThingRecord) *Summary {
	if s, err := r.decodeSummary(rec.Summary); err == nil {
		return s
	}
	raw := rec.Raw
	if raw == nil {
		var err error
		if raw, err = r.store.ThingRaw(rec.ID); err != nil {
			r.log.Error("skipping unreadable stored thing", "id", rec.ID, "err", err)
			return nil
		}
	}
	doc, err := r.Decoder().ParseDocument(raw)
	if err != nil {
		// A stored document was valid when accepted; losing the whole
		// registry over one bad record would be worse.
		r.log.Error("skipping unreadable stored thing", "id", rec.ID, "err", err)
		return nil
	}
	s, _ := r.summarize(doc)
	return s
}

// Close stops the write loop (writes in flight finish first) and ends every
// change-feed subscription.
func (r *Registry) Close() error {
	r.once.Do(func() { close(r.quit) })
	<-r.done
	r.feedMu.Lock()
	defer r.feedMu.Unlock()
	r.closed = true
	for s := range r.subs {
		r.dropLocked(s)
	}
	return nil
}

// Err reports whether the registry still accepts writes: nil while its
// write loop runs.
func (r *Registry) Err() error {
	select {
	case <-r.done:
		return Errorf(EUNAVAILABLE, "the registry's write loop has stopped")
	default:
		return nil
	}
}

// Create registers an anonymous TD (one without id) and returns the
// urn:uuid id the hub gave it. The stored document is the submitted one with
// that id inserted as its first member.
func (r *Registry) Create(ctx context.Context, raw []byte, origin Origin) (string, error) {
	if err := r.checkSize(len(raw)); err != nil {
		return "", err
	}
	doc, err := r.Decoder().ParseDocument(raw)
	if err != nil {
		return "", err
	}
	if _, ok := doc["id"]; ok {
		return "", &Error{Code: EINVALID, Message: "an anonymous Thing Description must not have an id; use PUT /things/{id} to register it under its id",
			Fields: []FieldError{{Field: "/id", Description: "must be absent when creating an anonymous Thing"}}}
	}
	if err := Validate(doc); err != nil {
		return "", err
	}
	if _, signed := doc["proof"]; signed {
		// The hub inserts the id, which the proof could not cover: a
		// signed description names itself.
		return "", &Error{Code: EINVALID, Message: "a signed Thing Description must carry its id (sign it with its id, then PUT /things/{id})",
			Fields: []FieldError{{Field: "/id", Description: "is required in a signed description"}}}
	}
	if _, err := r.verifyDoc(raw, doc, origin.Addr); err != nil {
		return "", err // unsigned under security.requireSigned
	}
	id := "urn:uuid:" + uuid.NewString()
	raw, err = insertID(raw, id)
	if err != nil {
		return "", err
	}
	doc["id"] = id
	sum, enc := r.summarize(doc)
	res := r.submit(ctx, &op{kind: opCreate, id: id, raw: raw, doc: doc, sum: sum, sumEnc: enc, origin: origin, admin: origin.Admin})
	return id, res.err
}

// Put creates or replaces the Thing id with raw, whose own id must equal id.
// It reports whether the Thing was created.
func (r *Registry) Put(ctx context.Context, id string, raw []byte, origin Origin) (bool, error) {
	return r.put(ctx, id, raw, origin, Precondition{})
}

func (r *Registry) put(ctx context.Context, id string, raw []byte, origin Origin, c Precondition) (bool, error) {
	if err := ValidateID(id); err != nil {
		return false, err
	}
	p, err := r.prepareFrom(raw, origin.Addr)
	if err != nil {
		return false, err
	}
	return r.putPrepared(ctx, id, p, origin, c)
}

// PreparedTD is a Thing Description checked against the size limit,
// parsed, validated and summarised: the CPU-heavy part of a write, which a
// door can run where one client's work cannot delay another's (the write
// loop only commits).
type PreparedTD struct {
	raw []byte
	doc map[string]any
	sum *Summary
	enc []byte
	// signer is the verified proof (nil: unsigned).
	signer *Signer
}

// Raw is the document as it will be stored.
func (p *PreparedTD) Raw() []byte { return p.raw }

// ID is the document's id ("" when it has none).
func (p *PreparedTD) ID() string {
	id, _ := p.doc["id"].(string)
	return id
}

// prepareFrom does the work of a write that needs no registry state: it
// refuses a document over MaxTDBytes before reading it, then parses,
// validates and summarises it, and verifies its proof once (charged to
// the writer's address from, security.verifyRate).
func (r *Registry) prepareFrom(raw []byte, from string) (*PreparedTD, error) {
	if err := r.checkSize(len(raw)); err != nil {
		return nil, err
	}
	doc, err := parseObject(raw, r.opts.MaxDepth)
	if err != nil {
		return nil, err
	}
	if _, signed := doc["proof"]; !signed {
		if err := duplicateMember(raw); err != nil {
			return nil, err
		}
		return r.prepareParsed(raw, doc, from)
	}
	// A signed document's verification canonicalizes all of it (RFC 8785,
	// I-JSON), which refuses a member name twice in one object as the hub
	// does: a verified document has none, so the hub's own pass over the
	// bytes runs only for a refused one, whose answer stays the same (the
	// duplicate and where it is, before any other fault).
	p, err := r.prepareParsed(raw, doc, from)
	if err != nil {
		if derr := duplicateMember(raw); derr != nil {
			return nil, derr
		}
		return nil, err
	}
	return p, nil
}

// prepareParsed is prepareFrom for raw parsed as doc.
func (r *Registry) prepareParsed(raw []byte, doc map[string]any, from string) (*PreparedTD, error) {
	if err := Validate(doc); err != nil {
		return nil, err
	}
	signer, err := r.verifyDoc(raw, doc, from)
	if err != nil {
		return nil, err
	}
	sum, enc := r.summarize(doc)
	return &PreparedTD{raw: raw, doc: doc, sum: sum, enc: enc, signer: signer}, nil
}

func (r *Registry) putPrepared(ctx context.Context, id string, p *PreparedTD, origin Origin, c Precondition) (bool, error) {
	return r.putPreparedWith(ctx, id, p, origin, c, "")
}

// putPreparedWith is putPrepared committing credHash (when not empty) with
// the description (Admission.register).
func (r *Registry) putPreparedWith(ctx context.Context, id string, p *PreparedTD, origin Origin, c Precondition, credHash string) (bool, error) {
	return r.putPreparedWithCred(ctx, id, p, origin, c, credHash, false)
}

// putPreparedWithCred is putPreparedWith that deletes the Thing's
// credential in the same commit when dropCred (Admission.registerByKey).
func (r *Registry) putPreparedWithCred(ctx context.Context, id string, p *PreparedTD, origin Origin, c Precondition, credHash string, dropCred bool) (bool, error) {
	if got, _ := p.doc["id"].(string); got != id {
		return false, &Error{Code: EINVALID, Message: fmt.Sprintf("the Thing Description's id must equal the id in the request (%q)", id),
			Fields: []FieldError{{Field: "/id", Description: fmt.Sprintf("is %s, want %q", describe(p.doc["id"]), id)}}}
	}
	res := r.submit(ctx, &op{kind: opPut, id: id, raw: p.raw, doc: p.doc, sum: p.sum, sumEnc: p.enc, origin: origin, cond: c, credHash: credHash,
		dropCred: dropCred, signer: p.signer, admin: origin.Admin, byProof: origin.ByProof})
	return res.created, res.err
}

// DefaultMaxTDBytes is the default of RegistryOptions.MaxTDBytes.
const DefaultMaxTDBytes = 256 << 10

// MaxTDBytes is the size limit of one Thing Description, for the doors
// that refuse a larger one before reading it all.
func (r *Registry) MaxTDBytes() int { return r.opts.MaxTDBytes }

// checkSize refuses a document of n bytes over MaxTDBytes.
func (r *Registry) checkSize(n int) error {
	if n > r.opts.MaxTDBytes {
		return TooLarge(n, r.opts.MaxTDBytes)
	}
	return nil
}

// TooLarge is the refusal of a Thing Description of n bytes over the
// limit of max bytes (registry.maxTDBytes); n < 0 when the door stopped
// reading before the end.
func TooLarge(n, max int) error {
	msg := fmt.Sprintf("the Thing Description is larger than the limit of %d bytes (registry.maxTDBytes)", max)
	if n >= 0 {
		msg = fmt.Sprintf("the Thing Description is %d bytes, more than the limit of %d bytes (registry.maxTDBytes)", n, max)
	}
	return &Error{Code: ETOOLARGE, Message: msg, Limit: "registry.maxTDBytes"}
}

// Patch applies an RFC 7396 merge patch to the stored document of id and
// re-validates the result. An empty patch refreshes the expiry from the TTL.
func (r *Registry) Patch(ctx context.Context, id string, raw []byte) error {
	return r.patch(ctx, id, raw, Precondition{})
}

func (r *Registry) patch(ctx context.Context, id string, raw []byte, c Precondition) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	patch, err := r.Decoder().ParseDocument(raw)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Message == errNotObject {
			return &Error{Code: EINVALID, Message: "a merge patch for a Thing Description must be a JSON object",
				Fields: e.Fields}
		}
		return err
	}
	if v, ok := patch["id"]; ok && v != id {
		return &Error{Code: EINVALID, Message: "a patch must not change the Thing's id",
			Fields: []FieldError{{Field: "/id", Description: fmt.Sprintf("is %s, want absent or %q", describe(v), id)}}}
	}
	// Patches come only from admin-token writes (HTTP PATCH).
	return r.submit(ctx, &op{kind: opPatch, id: id, patch: patch, cond: c, admin: true}).err
}

// SetPresence records that the Thing id is online or offline, as seen over
// via. It changes only the hub's metadata, never the document, and emits a
// presence event when the status or transport actually changed.
func (r *Registry) SetPresence(ctx context.Context, id, status string, via Source) error {
	switch status {
	case PresenceOnline, PresenceOffline, PresenceUnknown:
	default:
		return Errorf(EINVALID, "presence must be online, offline or unknown, not %q", status)
	}
	return r.submit(ctx, &op{kind: opPresence, id: id, presence: status, origin: Origin{Source: via}}).err
}

// Delete removes the Thing id.
func (r *Registry) Delete(ctx context.Context, id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	return r.submit(ctx, &op{kind: opDelete, id: id}).err
}

func (r *Registry) submit(ctx context.Context, o *op) opResult {
	o.done = make(chan opResult, 1)
	closing := opResult{err: Errorf(EUNAVAILABLE, "the registry is shutting down")}
	select {
	case <-r.quit:
		return closing
	default:
	}
	select {
	case r.ops <- o:
	case <-r.quit:
		return closing
	case <-ctx.Done():
		return opResult{err: ctx.Err()}
	}
	select {
	case res := <-o.done:
		return res
	case <-r.done:
		// The loop has ended; it may have answered just before.
		select {
		case res := <-o.done:
			return res
		default:
			return closing
		}
	case <-ctx.Done():
		// The write may still commit; the caller only stops waiting.
		return opResult{err: ctx.Err()}
	}
}

// Get returns the Thing id, or ENOTFOUND when it is absent or expired.
func (r *Registry) Get(id string) (Thing, error) {
	now := r.opts.Now()
	r.mu.RLock()
	t := r.things[id]
	r.mu.RUnlock()
	if t == nil || t.expired(now) {
		if err := ValidateID(id); err != nil {
			return Thing{}, err // say why it cannot exist, as writes do
		}
		return Thing{}, notFound(id)
	}
	return *t, nil
}

// Raw returns the document of id exactly as it was submitted.
func (r *Registry) Raw(id string) ([]byte, error) {
	if _, err := r.Get(id); err != nil {
		return nil, err
	}
	return r.store.ThingRaw(id)
}

// Document returns the parsed document of id, as submitted (not enriched).
// It is parsed for this call, so the caller may keep or change it.
func (r *Registry) Document(id string) (map[string]any, error) {
	raw, err := r.Raw(id)
	if err != nil {
		return nil, err
	}
	return r.Decoder().ParseDocument(raw)
}

// List returns up to limit Things (all when limit <= 0) starting at offset,
// in ascending code-point order of id, and the total number of Things. The
// Things are shared snapshots: a write installs a new *Thing, never changes
// one.
func (r *Registry) List(offset, limit int) ([]*Thing, int) {
	now := r.opts.Now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	things, total, _ := r.listLocked(offset, limit, now)
	return things, total
}

// listLocked is List under r.mu; hidden counts the expired, unpurged Things.
func (r *Registry) listLocked(offset, limit int, now time.Time) (out []*Thing, total, hidden int) {
	if r.expiring == 0 {
		// Nothing can have expired unseen: slice the id index directly.
		total := len(r.ids)
		lo := min(offset, total)
		hi := total
		if limit > 0 && limit < total-lo { // no lo+limit: it can overflow
			hi = lo + limit
		}
		out := make([]*Thing, 0, hi-lo)
		for _, id := range r.ids[lo:hi] {
			out = append(out, r.things[id])
		}
		return out, total, 0
	}
	for _, id := range r.ids {
		t := r.things[id]
		if t.expired(now) {
			hidden++
			continue
		}
		if total >= offset && (limit <= 0 || len(out) < limit) {
			out = append(out, t)
		}
		total++
	}
	return out, total, hidden
}

// Count returns the number of live Things.
func (r *Registry) Count() int {
	now := r.opts.Now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, t := range r.things {
		if !t.expired(now) {
			n++
		}
	}
	return n
}

// Revision is the sequence of the last published change. The list's etag
// comes from Page instead, which reads the revision with the index.
func (r *Registry) Revision() uint64 {
	r.feedMu.Lock()
	defer r.feedMu.Unlock()
	return r.published
}

func (t *Thing) expired(now time.Time) bool {
	return !t.Meta.Expires.IsZero() && !now.Before(t.Meta.Expires)
}

func notFound(id string) error {
	return Errorf(ENOTFOUND, "no Thing with id %q", id)
}

func describe(v any) string {
	if v == nil {
		return "absent"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// insertID puts "id" as the first member of the JSON object raw, so the
// stored document keeps the submitted bytes otherwise.
func insertID(raw []byte, id string) ([]byte, error) {
	i := bytes.IndexByte(raw, '{')
	if i < 0 {
		return nil, &Error{Code: EINVALID, Message: errNotObject,
			Fields: []FieldError{{Field: "", Description: "must be a JSON object"}}}
	}
	idJSON, err := json.Marshal(id)
	if err != nil {
		return nil, fmt.Errorf("cannot encode id: %w", err)
	}
	member := append(append([]byte(`"id":`), idJSON...), ',')
	if len(bytes.TrimSpace(raw[i+1:])) > 0 && bytes.TrimSpace(raw[i+1:])[0] == '}' {
		member = member[:len(member)-1] // empty object: no trailing comma
	}
	out := make([]byte, 0, len(raw)+len(member))
	out = append(out, raw[:i+1]...)
	out = append(out, member...)
	return append(out, raw[i+1:]...), nil
}

// registrationOf reads the client's registration.ttl / registration.expires.
// When ttl is present the hub computes expires from it and ignores the
// client's expires (WoT Discovery tdd-registrationinfo-vocab-expires);
// Validate has refused a ttl that is not a positive number.
func registrationOf(doc map[string]any, now time.Time) (ttl int64, expires time.Time) {
	reg, _ := doc["registration"].(map[string]any)
	if reg == nil {
		return 0, time.Time{}
	}
	if f, ok := jsonx.Number(reg["ttl"]); ok {
		if f > 0 && !math.IsInf(f, 0) {
			ttl = int64(math.Ceil(f)) // whole seconds, rounded up; Validate bounds f
			return ttl, now.Add(time.Duration(ttl) * time.Second)
		}
		return 0, time.Time{}
	}
	if s, ok := reg["expires"].(string); ok {
		if t, err := ParseDateTime(s); err == nil {
			return 0, t
		}
	}
	return 0, time.Time{}
}

// EachEnrichedJSON calls fn with the enriched JSON of each Thing, in order,
// reading their stored documents in one store transaction (so callers pass
// bounded chunks and write to the network between them, never inside it).
// doc is valid only during the call. A Thing deleted since it was listed is
// left out.
func (r *Registry) EachEnrichedJSON(things []*Thing, fn func(doc []byte) error) error {
	now := r.opts.Now()
	ids := make([]string, len(things))
	byID := make(map[string]*Thing, len(things))
	for i, t := range things {
		ids[i] = t.ID
		byID[t.ID] = t
	}
	var buf []byte
	err := r.store.ThingsRaw(ids, func(id string, raw []byte) error {
		buf = byID[id].AppendEnrichedJSON(buf[:0], raw, now)
		return fn(buf)
	})
	if err != nil {
		return &Error{Code: EINTERNAL, Message: "cannot read stored documents", Err: err}
	}
	return nil
}
