package hub_test

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// refused checks that err is a 400 with a validationErrors entry at field
// and that id was not stored.
func refused(t *testing.T, s *gatedStore, id string, err error, field string) {
	t.Helper()
	if hub.ErrorCode(err) != hub.EINVALID {
		t.Fatalf("err = %v, want %s", err, hub.EINVALID)
	}
	p := hub.ProblemOf(err)
	if p.Status != 400 || len(p.ValidationErrors) == 0 || p.ValidationErrors[0].Field != field || p.ValidationErrors[0].Description == "" {
		t.Errorf("problem = %+v, want 400 with validationErrors at %q", p, field)
	}
	if _, err := s.ThingRaw(id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("refused Thing %s stored: %v", id, err)
	}
}

// WoT Discovery tdd-registrationinfo-vocab-ttl and
// tdd-registrationinfo-vocab-expires: the directory computes expires from
// ttl and ignores a client's expires when ttl is present; a ttl of 0 is
// refused like an expires that is already over (PROTOCOL §10 "TTL").
func TestTDD_registrationinfo_vocab_ttl_expires(t *testing.T) {
	s := openStore(t)
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newRegistry(t, s, hub.RegistryOptions{Now: clock.Now})
	ctx := context.Background()

	for name, reg := range map[string]string{
		"ttl 0":                  `{"ttl": 0}`,
		"ttl 0.0":                `{"ttl": 0.0}`,
		"ttl 0 beside expires":   `{"ttl": 0, "expires": "2099-01-01T00:00:00Z"}`,
		"ttl -0 beside expires":  `{"ttl": -0, "expires": "2099-01-01T00:00:00Z"}`,
		"ttl 0e5 beside expires": `{"ttl": 0e5, "expires": "2099-01-01T00:00:00Z"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := r.Put(ctx, "urn:t:zero", testTD("urn:t:zero", "z", "registration", reg), hub.Origin{})
			refused(t, s, "urn:t:zero", err, "/registration/ttl")
		})
	}
	// Also through POST and PATCH, which share the validation.
	anon := `{"@context":"https://www.w3.org/2022/wot/td/v1.1","title":"z","securityDefinitions":{"n":{"scheme":"nosec"}},` +
		`"security":"n","registration":{"ttl":0}}`
	if _, err := r.Create(ctx, []byte(anon), hub.Origin{}); hub.ErrorCode(err) != hub.EINVALID || r.Count() != 0 {
		t.Errorf("POST ttl 0: %v, %d stored", err, r.Count())
	}
	if _, err := r.Put(ctx, "urn:t:p", testTD("urn:t:p", "p"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Patch(ctx, "urn:t:p", []byte(`{"registration":{"ttl":0}}`)); hub.ErrorCode(err) != hub.EINVALID {
		t.Errorf("PATCH ttl 0: %v", err)
	}
	if th, _ := r.Get("urn:t:p"); th.Meta.TTL != 0 || !th.Meta.Expires.IsZero() {
		t.Errorf("refused PATCH changed the Thing: %+v", th.Meta)
	}

	// A client's expires beside a valid ttl is ignored, whether it is
	// later, earlier or already over: the hub's value is kept and served.
	for _, exp := range []string{"2099-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "2000-01-01T00:00:00Z"} {
		id := "urn:t:both"
		if _, err := r.Put(ctx, id, testTD(id, "b", "registration", `{"ttl": 60, "expires": "`+exp+`"}`), hub.Origin{}); err != nil {
			t.Fatalf("ttl 60 with expires %s: %v", exp, err)
		}
		want := clock.Now().Add(60 * time.Second)
		th, _ := r.Get(id)
		if th.Meta.TTL != 60 || !th.Meta.Expires.Equal(want) {
			t.Errorf("expires %s: meta %+v, want ttl 60 and expires %v", exp, th.Meta, want)
		}
		reg, _ := th.Enriched(map[string]any{"id": id}, clock.Now())["registration"].(map[string]any)
		if reg["expires"] != want.Format(time.RFC3339Nano) {
			t.Errorf("expires %s: served registration %v, want expires %s", exp, reg, want.Format(time.RFC3339Nano))
		}
	}
}

// WoT Discovery tdd-absolute-time: RFC 3339 §5.6 allows a lower-case "t"
// and "z"; both are read, and values that are still not RFC 3339 are not.
func TestTDD_absolute_time(t *testing.T) {
	s := openStore(t)
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newRegistry(t, s, hub.RegistryOptions{Now: clock.Now})
	ctx := context.Background()

	for exp, want := range map[string]time.Time{
		"2099-01-01t00:00:00z":         time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC),
		"2099-01-01T00:00:00z":         time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC),
		"2099-01-01t00:00:00Z":         time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC),
		"2099-01-01t01:30:00.5+01:00":  time.Date(2099, 1, 1, 0, 30, 0, 5e8, time.UTC),
		"2099-01-01T00:00:00.25-00:00": time.Date(2099, 1, 1, 0, 0, 0, 25e7, time.UTC),
	} {
		id := "urn:t:lower"
		if _, err := r.Put(ctx, id, testTD(id, "l", "registration", `{"expires": "`+exp+`"}`), hub.Origin{}); err != nil {
			t.Errorf("expires %q: %v", exp, err)
			continue
		}
		if th, _ := r.Get(id); !th.Meta.Expires.Equal(want) {
			t.Errorf("expires %q read as %v, want %v", exp, th.Meta.Expires, want)
		}
	}
	for _, exp := range []string{
		"2099-01-01x00:00:00z", "2099-01-01 00:00:00Z", "2099-01-01t00:00:00", "2099-01-01", "2099-13-01t00:00:00z",
		"2099-01-01t25:00:00z", "2099-01-01t00:00:00zz", "2099-01-01T00:00:00+0100", "yesterday", "z", "t", "",
	} {
		_, err := r.Put(ctx, "urn:t:bad", testTD("urn:t:bad", "b", "registration", `{"expires": "`+exp+`"}`), hub.Origin{})
		refused(t, s, "urn:t:bad", err, "/registration/expires")
	}
}

// WoT Discovery tdd-validation-response: a body that is JSON but not an
// object is a validation error with validationErrors at the root.
func TestTDD_validation_response_not_an_object(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	ctx := context.Background()
	if _, err := r.Put(ctx, "urn:t:x", testTD("urn:t:x", "x"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	before, _ := s.ThingRaw("urn:t:x")
	for _, body := range []string{`[]`, `"a string"`, `42`, `true`, `null`, `[{"id":"urn:t:y"}]`} {
		_, err := r.Put(ctx, "urn:t:y", []byte(body), hub.Origin{})
		refused(t, s, "urn:t:y", err, "")
		_, err = r.Create(ctx, []byte(body), hub.Origin{})
		refused(t, s, "urn:t:y", err, "")
		err = r.Patch(ctx, "urn:t:x", []byte(body))
		refused(t, s, "urn:t:y", err, "")
	}
	if after, _ := s.ThingRaw("urn:t:x"); string(after) != string(before) || r.Count() != 1 {
		t.Errorf("refused patches changed the Thing: %s", after)
	}
}
