package mqtt

import (
	"fmt"
	"net"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// BenchmarkDissolveWithSessions measures DissolveGroup of a group of 1,024
// members (no credentials issued: the broker's revocation alone) while
// 1,000 MQTT sessions are connected: the write loop finds each removed
// member's sessions before the dissolution is answered.
func BenchmarkDissolveWithSessions(b *testing.B) {
	const sessions, members = 1000, hub.MaxGroupMembers
	e := newEnv(b, nil)
	ctx := b.Context()
	ids := make([]string, members)
	for i := range ids {
		ids[i] = fmt.Sprintf("urn:dissolve:%04d", i)
		if _, err := e.reg.Put(ctx, ids[i], tdgen.MakeTD(ids[i], ids[i]), hub.Origin{Source: hub.SourceHTTP}); err != nil {
			b.Fatal(err)
		}
	}
	conns := make([]net.Conn, 0, sessions)
	for i := range sessions {
		c, err := idleClient(e.addr, fmt.Sprintf("idle-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		gid := fmt.Sprintf("g%d", i)
		if _, err := e.reg.CreateGroup(ctx, hub.GroupSpec{ID: gid, Title: gid, Members: ids}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := e.reg.DissolveGroup(ctx, gid); err != nil {
			b.Fatal(err)
		}
	}
}
