package dirsync_test

import (
	"crypto/ed25519"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/regtest"
)

// failing answers the first n list reads with status (and hdr), then
// lets requests through; it counts what it refused.
func failing(n int32, status int, hdr map[string]string) (func(w http.ResponseWriter, r *http.Request) bool, *atomic.Int32) {
	var refused atomic.Int32
	return func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/things" || refused.Load() >= n {
			return false
		}
		refused.Add(1)
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"status":%d,"detail":"refused by the test"}`, status)
		return true
	}, &refused
}

// Each failure of the remote is reported in the link's state (down, the
// error, counted) and retried, and the Puller syncs once the remote
// answers: 500s with backoff, 401 slowly, a slow answer past the request
// timeout.
func TestPullRetriesAFailingRemote(t *testing.T) {
	remote := hubtest.Start(t, nil)
	remote.Put("urn:r:f", hubtest.BareTD("urn:r:f", "F"))
	for _, c := range []struct {
		name   string
		status int
		want   string
	}{
		{"500", http.StatusInternalServerError, "500 Internal Server Error: refused by the test"},
		{"401", http.StatusUnauthorized, "401 Unauthorized (check the token the remote expects)"},
		{"503", http.StatusServiceUnavailable, "503"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFront(t, remote.URL)
			fault, refused := failing(3, c.status, nil)
			f.setFault(fault)
			reg, _ := regtest.Open(t, hub.RegistryOptions{})
			p := startPuller(t, f.srv.URL, reg, nil)
			<-p.Synced()
			st := p.State()
			if refused.Load() != 3 || st.State != hub.LinkConnected || st.Errors != 3 || !strings.Contains(st.LastError, c.want) ||
				st.LastErrorAt.IsZero() || st.Things != 1 {
				t.Fatalf("state after %d refusals and the recovery %+v", refused.Load(), st)
			}
		})
	}
	t.Run("slow", func(t *testing.T) {
		f := newFront(t, remote.URL)
		var slow atomic.Int32
		f.setFault(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == "/things" && slow.Add(1) == 1 {
				<-r.Context().Done() // never answers; the Puller gives up
				return true
			}
			return false
		})
		reg, _ := regtest.Open(t, hub.RegistryOptions{})
		p := startPuller(t, f.srv.URL, reg, func(c *dirsync.PullConfig) { c.RequestTimeout = 200 * time.Millisecond })
		<-p.Synced()
		if st := p.State(); st.Errors < 1 || !strings.Contains(st.LastError, "deadline exceeded") || st.Things != 1 {
			t.Fatalf("state %+v", st)
		}
	})
	t.Run("down", func(t *testing.T) {
		dead := httptestClosedURL(t)
		reg, _ := regtest.Open(t, hub.RegistryOptions{})
		p := startPuller(t, dead, reg, nil)
		eventually(t, "the failures", func() bool { return p.State().Errors >= 3 })
		if st := p.State(); st.State != hub.LinkDown || !strings.Contains(st.LastError, "cannot reach the remote directory") {
			t.Fatalf("state %+v", st)
		}
	})
}

// 429 with Retry-After: the next try waits at least that long.
func TestPullHonoursRetryAfter(t *testing.T) {
	remote := hubtest.Start(t, nil)
	remote.Put("urn:r:ra", hubtest.BareTD("urn:r:ra", "R"))
	f := newFront(t, remote.URL)
	var refusedAt atomic.Int64
	var after atomic.Int64
	f.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/things" {
			return false
		}
		if refusedAt.Load() == 0 {
			refusedAt.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		after.CompareAndSwap(0, time.Now().UnixNano())
		return false
	})
	reg, _ := regtest.Open(t, hub.RegistryOptions{})
	p := startPuller(t, f.srv.URL, reg, nil) // backoff alone would retry within 10 ms
	<-p.Synced()
	if wait := time.Duration(after.Load() - refusedAt.Load()); wait < time.Second {
		t.Fatalf("retried %v after a 429 with Retry-After: 1", wait)
	}
	if st := p.State(); !strings.Contains(st.LastError, "429") || st.Errors < 1 {
		t.Fatalf("state %+v", st)
	}
}

// A remote Thing the local registry refuses (here too large for it) is
// reported, counted and left out; the others are mirrored.
func TestPullReportsARemoteThingFailingValidation(t *testing.T) {
	remote := hubtest.Start(t, nil)
	remote.Put("urn:r:ok1", hubtest.BareTD("urn:r:ok1", "OK"))
	remote.Put("urn:r:big", hubtest.BareTD("urn:r:big", strings.Repeat("b", 3000)))
	remote.Put("urn:r:ok2", hubtest.BareTD("urn:r:ok2", "OK"))
	reg, _ := regtest.Open(t, hub.RegistryOptions{MaxTDBytes: 2048})
	p := startPuller(t, remote.URL, reg, func(c *dirsync.PullConfig) { c.MaxTDBytes = 2048 })
	<-p.Synced()
	if got := reg.MirroredFrom(remote.URL); len(got) != 2 || got[0] != "urn:r:ok1" || got[1] != "urn:r:ok2" {
		t.Fatalf("mirrored %v", got)
	}
	if _, err := reg.Get("urn:r:big"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("the refused Thing was stored: %v", err)
	}
	st := p.State()
	if st.Errors != 1 || !strings.Contains(st.LastError, `"urn:r:big"`) || !strings.Contains(st.LastError, "registry.maxTDBytes") || st.State != hub.LinkConnected {
		t.Fatalf("state %+v", st)
	}
	// Live changes go on.
	remote.Put("urn:r:ok3", hubtest.BareTD("urn:r:ok3", "OK3"))
	eventually(t, "ok3", func() bool { return titleOf(t, reg, "urn:r:ok3") == "OK3" })
}

// A remote listing an id bound here to a key, without that key's proof,
// does not override it: refused, reported, the local Thing unchanged.
func TestPullRefusesAKeyBoundID(t *testing.T) {
	remote := hubtest.Start(t, nil)
	_, key, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	reg, _ := regtest.Open(t, hub.RegistryOptions{})
	local, err := proof.Sign(hubtest.BareTD("urn:r:bound", "Mine"), key, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Put(t.Context(), "urn:r:bound", local, hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Fatal(err)
	}
	_ = reg.SetPresence(t.Context(), "urn:r:bound", hub.PresenceOffline, hub.SourceMQTT)
	theirs, err := proof.Sign(hubtest.BareTD("urn:r:bound", "Theirs"), other, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	remote.Put("urn:r:bound", theirs)
	// A signed Thing still verifies here, read from the remote enriched.
	free, err := proof.Sign(hubtest.BareTD("urn:r:free", "Free"), other, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	remote.Put("urn:r:free", free)
	rev := reg.Revision()
	p := startPuller(t, remote.URL, reg, nil)
	<-p.Synced()
	if got := reg.MirroredFrom(remote.URL); len(got) != 1 || got[0] != "urn:r:free" {
		t.Fatalf("mirrored %v", got)
	}
	if th, _ := reg.Get("urn:r:free"); th.Meta.Verified != proof.DID(other.Public().(ed25519.PublicKey)) {
		t.Fatalf("the signed mirror is not verified: %+v", th.Meta)
	}
	if reg.Revision() != rev+1 {
		t.Fatalf("revision %d → %d: more than the free Thing was written", rev, reg.Revision())
	}
	raw, _ := reg.Raw("urn:r:bound")
	if string(raw) != string(local) {
		t.Fatalf("the bound Thing changed: %s", raw)
	}
	st := p.State()
	if st.Errors != 1 || !strings.Contains(st.LastError, "bound here to another key") {
		t.Fatalf("state %+v", st)
	}
}
