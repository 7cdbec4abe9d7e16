package web

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Agent groups over HTTP (PROTOCOL §7): reading them is a directory read;
// changing them needs a token of scope operate or admin
// (hub.OpManageGroups); a Thing joins or leaves a self-join group by
// itself with a signed statement instead of a token.

// groupRoutes mounts /api/groups.
func (s *Server) groupRoutes() {
	m := s.mux
	manage := func(h http.HandlerFunc) http.HandlerFunc {
		return s.limited(s.allow(hub.OpManageGroups, s.chargeIssuance(h)))
	}
	m.HandleFunc("GET /api/groups", s.limitedRead(s.read(s.listGroups)))
	m.HandleFunc("POST /api/groups", manage(s.createGroup))
	m.HandleFunc("GET /api/groups/{gid}", s.read(s.getGroup))
	m.HandleFunc("PUT /api/groups/{gid}", manage(s.putGroup))
	m.HandleFunc("PATCH /api/groups/{gid}", manage(s.patchGroup))
	m.HandleFunc("DELETE /api/groups/{gid}", manage(s.dissolveGroup))
	m.HandleFunc("PUT /api/groups/{gid}/members/{thing}", s.memberWrite(manage, true))
	m.HandleFunc("DELETE /api/groups/{gid}/members/{thing}", s.memberWrite(manage, false))
}

// chargeIssuance tells the registry whom the credentials a group write
// issues are charged to (PROTOCOL §10.0, groups.issueRate): the token; an
// admin token is neither paced nor kept out of the status list's reserve.
func (s *Server) chargeIssuance(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.principalOf(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		is := hub.Issuance{Key: "addr:" + hub.SourceOf(clientAddr(r)), Anonymous: true}
		if p.Kind == hub.ByToken {
			is = hub.Issuance{Key: "token:" + p.Token.ID, Admin: p.Token.EffectiveScope() == hub.ScopeAdmin}
		}
		h(w, r.WithContext(hub.WithIssuance(r.Context(), is)))
	}
}

// groupView is a group as the API shows it: members as ids, and each
// membership's DID and start (never its credential).
type groupView struct {
	ID            string           `json:"id"`
	Title         string           `json:"title"`
	Description   string           `json:"description,omitempty"`
	Members       []string         `json:"members"`
	RequireSigned bool             `json:"requireSigned"`
	SelfJoin      bool             `json:"selfJoin"`
	Created       time.Time        `json:"created"`
	Modified      time.Time        `json:"modified"`
	Memberships   []membershipView `json:"memberships"`
}

type membershipView struct {
	Thing string    `json:"thing"`
	DID   string    `json:"did,omitempty"`
	Since time.Time `json:"since"`
}

func viewGroup(g hub.Group) groupView {
	v := groupView{ID: g.ID, Title: g.Title, Description: g.Description, Members: g.MemberIDs(),
		RequireSigned: g.RequireSigned, SelfJoin: g.SelfJoin, Created: g.Created.UTC(), Modified: g.Modified.UTC(),
		Memberships: make([]membershipView, len(g.Members))}
	for i, m := range g.Members {
		v.Memberships[i] = membershipView{Thing: m.Thing, DID: m.DID, Since: m.Since.UTC()}
	}
	return v
}

// groupTag is a group's entity tag: its modified time, which every change
// of the group moves.
func groupTag(g hub.Group) string { return strconv.FormatInt(g.Modified.UnixNano(), 36) }

// groupPath is the URL path of a group (its id needs no escaping).
func groupPath(gid string) string { return "/api/groups/" + gid }

// writeGroup answers with the group's view and its ETag.
func writeGroup(w http.ResponseWriter, status int, g hub.Group) {
	w.Header().Set("ETag", `"`+groupTag(g)+`"`)
	writeJSON(w, status, lmos.MediaJSON, viewGroup(g))
}

// groupList is the encoded group list, kept until the groups change: 64
// groups of 1,024 members are 5.4 MB, which every anonymous GET encoded
// anew (issue 24: 16 clients, 23.6 s of CPU in 15 s, 689 MB).
type groupList struct {
	mu    sync.Mutex
	valid bool
	gen   uint64   // the registry's groups generation encoded
	items [][]byte // each group's view, in id order
	full  []byte   // the whole list as one array, as writeJSON wrote it
}

// groupsEncoded returns the encoded views of every group, in id order,
// and the whole list, shared (never changed) until the groups change.
func (s *Server) groupsEncoded() (items [][]byte, full []byte) {
	c := &s.groupList
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.valid && c.gen == s.reg.GroupsGen() {
		return c.items, c.full
	}
	all, gen := s.reg.GroupsSnapshot()
	items = make([][]byte, len(all))
	size := 2
	for i, g := range all {
		items[i], _ = json.Marshal(viewGroup(g))
		size += len(items[i]) + 1
	}
	full = make([]byte, 0, size)
	full = append(full, '[')
	for i, it := range items {
		if i > 0 {
			full = append(full, ',')
		}
		full = append(full, it...)
	}
	full = append(full, "]\n"...)
	c.valid, c.gen, c.items, c.full = true, gen, items, full
	s.groupListEncoded.Inc()
	return items, full
}

// listGroups answers every group (an array, as always) or, with limit
// and offset, one page of them with a Link to the next, as /things does.
// The encoding is shared until a group changes; the request counts
// against the client's request rate (http.writeRate) as a write does.
func (s *Server) listGroups(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, err := intParam(q, "offset", 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	limit, err := intParam(q, "limit", 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items, full := s.groupsEncoded()
	if offset == 0 && limit == 0 {
		writeBytes(w, http.StatusOK, lmos.MediaJSON, full)
		return
	}
	start := min(offset, len(items))
	end := len(items)
	if limit > 0 && limit < end-start { // no start+limit: it can overflow
		end = start + limit
	}
	if end < len(items) {
		w.Header().Add("Link", "</api/groups?offset="+strconv.Itoa(end)+"&limit="+strconv.Itoa(limit)+`>; rel="next"`)
	}
	// The page is written from the shared encodings, not copied.
	page := items[start:end]
	n := 3
	for _, it := range page {
		n += len(it) + 1
	}
	if len(page) > 0 {
		n--
	}
	w.Header().Set("Content-Type", lmos.MediaJSON)
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte{'['})
	for i, it := range page {
		if i > 0 {
			_, _ = w.Write([]byte{','})
		}
		if _, err := w.Write(it); err != nil {
			return
		}
	}
	_, _ = w.Write([]byte("]\n"))
}

func (s *Server) getGroup(w http.ResponseWriter, r *http.Request) {
	g, err := s.reg.Group(r.PathValue("gid"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if notModified(w, r, `"`+groupTag(g)+`"`) {
		return
	}
	writeGroup(w, http.StatusOK, g)
}

// groupMembers are the members a group body may hold; "created",
// "modified" and "memberships" are the hub's (a view sent back is
// accepted, those members ignored).
var (
	groupMembers   = []string{"id", "title", "description", "requireSigned", "selfJoin", "members"}
	groupReadOnly  = []string{"created", "modified", "memberships"}
	errGroupFormat = `a group is {"id", "title", "description", "requireSigned", "selfJoin", "members": [Thing ids]}`
)

// parseGroup reads a group body (an object decoded from JSON) into a spec
// for gid ("" when the body may name it), with a field error per bad member;
// registered checks that each member is a registered Thing.
func (s *Server) parseGroup(doc any, gid string, registered bool) (hub.GroupSpec, error) {
	obj, ok := doc.(map[string]any)
	if !ok {
		return hub.GroupSpec{}, hub.Errorf(hub.EINVALID, "the body must be a JSON object: %s", errGroupFormat)
	}
	var spec hub.GroupSpec
	var fields []hub.FieldError
	bad := func(member, want string) {
		fields = append(fields, hub.FieldError{Field: "/" + member, Description: want})
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		switch k {
		case "id":
			id, ok := v.(string)
			switch {
			case !ok:
				bad(k, "must be a string")
			case gid != "" && id != gid:
				bad(k, fmt.Sprintf("must be %q, the id in the URL", gid))
			default:
				spec.ID = id
			}
		case "title", "description":
			str, ok := v.(string)
			if !ok {
				bad(k, "must be a string")
			} else if k == "title" {
				spec.Title = str
			} else {
				spec.Description = str
			}
		case "requireSigned", "selfJoin":
			b, ok := v.(bool)
			if !ok {
				bad(k, "must be true or false")
			} else if k == "requireSigned" {
				spec.RequireSigned = b
			} else {
				spec.SelfJoin = b
			}
		case "members":
			list, ok := v.([]any)
			if !ok {
				bad(k, "must be an array of Thing ids")
				continue
			}
			spec.Members = make([]string, 0, len(list))
			for i, e := range list {
				id, ok := e.(string)
				if !ok {
					bad(k+"/"+strconv.Itoa(i), "must be a Thing id (a string)")
					continue
				}
				if hub.ValidateID(id) != nil {
					bad(k+"/"+strconv.Itoa(i), "not a Thing id")
				} else if registered && !s.registered(id) {
					bad(k+"/"+strconv.Itoa(i), fmt.Sprintf("no Thing %q is registered", lmos.Truncate(id, 128)))
				}
				spec.Members = append(spec.Members, id)
			}
		default:
			if !slices.Contains(groupReadOnly, k) {
				bad(jsonx.EscapePointer(k), "is not a member of a group: "+strings.Join(groupMembers, ", "))
			}
		}
	}
	if gid != "" {
		spec.ID = gid
	}
	if len(fields) > 0 {
		return spec, &hub.Error{Code: hub.EINVALID, Message: "invalid group", Fields: fields}
	}
	return spec, nil
}

// registered reports whether the Thing id is in the directory.
func (s *Server) registered(id string) bool {
	_, err := s.reg.Get(id)
	return hub.ErrorCode(err) != hub.ENOTFOUND
}

// readGroupDoc reads and decodes a JSON body of one of the media types.
func (s *Server) readGroupDoc(w http.ResponseWriter, r *http.Request, media ...string) (any, error) {
	body, err := s.readBody(w, r, media...)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, &hub.Error{Code: hub.EINVALID, Message: "the body is not JSON: " + errGroupFormat, Err: err}
	}
	if ptr, dup := jsonx.DuplicateMember(body); dup {
		return nil, &hub.Error{Code: hub.EINVALID, Message: "the body has a member twice", Fields: []hub.FieldError{{Field: ptr, Description: "appears twice"}}}
	}
	return doc, nil
}

// groupWriteError words the registry's refusal of a group body: a member
// that is not registered (a Thing deleted after the body was read) is a
// fault of the body.
func groupWriteError(err error) error {
	if hub.ErrorCode(err) == hub.ENOTFOUND {
		return &hub.Error{Code: hub.EINVALID, Message: "invalid group", Err: err,
			Fields: []hub.FieldError{{Field: "/members", Description: hub.ErrorMessage(err)}}}
	}
	return err
}

// newGroupID makes the id of a group created without one: 12 hex digits,
// one topic level and one path segment.
func newGroupID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "g" + hex.EncodeToString(b[:])
}

func (s *Server) createGroup(w http.ResponseWriter, r *http.Request) {
	doc, err := s.readGroupDoc(w, r, lmos.MediaJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	spec, err := s.parseGroup(doc, "", true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if spec.ID == "" {
		spec.ID = newGroupID()
	}
	g, err := s.reg.CreateGroup(r.Context(), spec)
	if err != nil {
		s.writeError(w, r, groupWriteError(err))
		return
	}
	w.Header().Set("Location", groupPath(g.ID))
	writeGroup(w, http.StatusCreated, g)
}

// ifMatchGroup reads If-Match for a group write: the modified time it
// names (ok false: no If-Match). A tag that is not the group's current
// one, or "*" on an absent group, fails with EPRECONDITION.
func (s *Server) ifMatchGroup(r *http.Request, gid string) (modified time.Time, ok bool, err error) {
	c := writePrecondition(r)
	if !c.IfMatch {
		return time.Time{}, false, nil
	}
	g, gerr := s.reg.Group(gid)
	if gerr != nil {
		return time.Time{}, true, hub.Errorf(hub.EPRECONDITION, "If-Match: no group %q", gid)
	}
	if !c.IfMatchAny && !slices.Contains(c.MatchTags, groupTag(g)) {
		return time.Time{}, true, hub.Errorf(hub.EPRECONDITION, "If-Match: the group's current version is \"%s\"", groupTag(g))
	}
	// The registry compares again in its write loop: a change after this
	// read fails the write.
	return g.Modified, true, nil
}

func (s *Server) putGroup(w http.ResponseWriter, r *http.Request) {
	gid := r.PathValue("gid")
	if err := hub.ValidateGroupID(gid); err != nil {
		s.writeError(w, r, err)
		return
	}
	doc, err := s.readGroupDoc(w, r, lmos.MediaJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	spec, err := s.parseGroup(doc, gid, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var g hub.Group
	created := false
	if c := writePrecondition(r); c.IfNoneMatch && c.IfNoneMatchAny {
		// Create only.
		g, err = s.reg.CreateGroup(r.Context(), spec)
		if hub.ErrorCode(err) == hub.ECONFLICT {
			err = hub.Errorf(hub.EPRECONDITION, "If-None-Match: *: the group %q exists", gid)
		}
		created = err == nil
	} else if modified, cond, perr := s.ifMatchGroup(r, gid); perr != nil {
		err = perr
	} else if cond {
		g, err = s.reg.PutGroupIf(r.Context(), spec, modified)
	} else {
		g, created, err = s.reg.PutGroup(r.Context(), spec)
	}
	if err != nil {
		s.writeError(w, r, groupWriteError(err))
		return
	}
	if created {
		w.Header().Set("Location", groupPath(g.ID))
		writeGroup(w, http.StatusCreated, g)
		return
	}
	writeGroup(w, http.StatusOK, g)
}

// groupDoc is what a merge patch of a group applies to.
func groupDoc(g hub.Group) map[string]any {
	members := make([]any, len(g.Members))
	for i, m := range g.Members {
		members[i] = m.Thing
	}
	doc := map[string]any{"id": g.ID, "title": g.Title, "requireSigned": g.RequireSigned, "selfJoin": g.SelfJoin, "members": members}
	if g.Description != "" {
		doc["description"] = g.Description
	}
	return doc
}

// patchGroup applies an RFC 7396 merge patch over {title, description,
// requireSigned, selfJoin, members}, in the registry's write loop to the
// group as it is then: concurrent patches never undo each other.
func (s *Server) patchGroup(w http.ResponseWriter, r *http.Request) {
	gid := r.PathValue("gid")
	patch, err := s.readGroupDoc(w, r, mtMergePatch)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, ok := patch.(map[string]any); !ok {
		s.writeError(w, r, hub.Errorf(hub.EINVALID, "a merge patch of a group is a JSON object"))
		return
	}
	modified, pinned, err := s.ifMatchGroup(r, gid)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Point at unregistered members before queueing the write (the write
	// loop checks them again, without pointers).
	if cur, err := s.reg.Group(gid); err == nil {
		if _, err := s.parseGroup(jsonx.MergePatch(groupDoc(cur), patch), gid, true); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	g, err := s.reg.PatchGroup(r.Context(), gid, func(old hub.Group) (hub.GroupSpec, error) {
		if pinned && !old.Modified.Equal(modified) {
			return hub.GroupSpec{}, hub.Errorf(hub.EPRECONDITION, "If-Match: the group changed")
		}
		return s.parseGroup(jsonx.MergePatch(groupDoc(old), patch), gid, false)
	})
	if _, gerr := s.reg.Group(gid); err != nil && gerr == nil {
		err = groupWriteError(err) // a member not registered
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeGroup(w, http.StatusOK, g)
}

func (s *Server) dissolveGroup(w http.ResponseWriter, r *http.Request) {
	gid := r.PathValue("gid")
	modified, cond, err := s.ifMatchGroup(r, gid)
	switch {
	case err != nil:
	case cond:
		err = s.reg.DissolveGroupIf(r.Context(), gid, modified)
	default:
		err = s.reg.DissolveGroup(r.Context(), gid)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// memberWrite is PUT (join) or DELETE (leave) of a membership: with a
// token, as manage allows; without any Authorization, the body must be
// the Thing's own signed statement (PROTOCOL §7), rate-limited as a write
// and its proof as every proof (security.verifyRate).
func (s *Server) memberWrite(manage func(http.HandlerFunc) http.HandlerFunc, join bool) http.HandlerFunc {
	byToken := manage(func(w http.ResponseWriter, r *http.Request) {
		gid, thing := r.PathValue("gid"), r.PathValue("thing")
		var g hub.Group
		var err error
		if join {
			g, err = s.reg.AddMember(r.Context(), gid, thing)
		} else {
			g, err = s.reg.RemoveMember(r.Context(), gid, thing)
		}
		s.answerMember(w, r, g, err, join)
	})
	byStatement := s.limited(func(w http.ResponseWriter, r *http.Request) {
		body, err := s.readStatement(w, r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		g, err := s.reg.SelfMembership(r.Context(), r.PathValue("gid"), r.PathValue("thing"), join, body, clientAddr(r))
		s.answerMember(w, r, g, err, join)
	})
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			byToken(w, r)
			return
		}
		byStatement(w, r)
	}
}

// readStatement reads a self-join statement: an empty body is no
// credential at all (401), any other one must be JSON.
func (s *Server) readStatement(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength == 0 {
		return nil, nil // SelfMembership: 401
	}
	limit := min(s.cfg.MaxBodyBytes, hub.MaxStatementBytes)
	body, err := s.readBodyMax(w, r, limit, func(n int64) error { return hub.TooLarge(int(n), int(limit)) }, lmos.MediaJSON)
	if err != nil {
		return nil, err
	}
	return bytes.TrimSpace(body), nil
}

// answerMember answers a membership change: the group after it (a join)
// or 204 (a leave).
func (s *Server) answerMember(w http.ResponseWriter, r *http.Request, g hub.Group, err error, join bool) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !join {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Location", groupPath(g.ID))
	writeGroup(w, http.StatusOK, g)
}
