package mqtt

import (
	"context"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/hooks/storage"
	mpackets "github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// The retained descriptions on …/td are rebuilt from the registry at start
// (issue 12, point 6): a crash loses the broker state written behind, so a
// Thing joined over MQTT may come back with no retained copy, or an older
// one. Simulated by editing the broker store while the hub is down: one
// copy deleted, one set back to the Thing's previous description, one left
// for a Thing no longer registered. After the restart a subscriber
// (mosquitto_sub, retained messages only) gets exactly the registry's
// description of every Thing joined over MQTT, and none of a Thing
// registered by other means.
func TestRetainedTDsRebuiltAtStart(t *testing.T) {
	bin := requireBin(t, "mosquitto_sub")
	e := newEnv(t, nil)
	ids := []string{"urn:r1", "urn:r2", "urn:r3"}
	var creds []*credentials
	for _, id := range ids {
		creds = append(creds, e.thing(t, id))
	}
	old := makeTD("urn:r2", "urn:r2")
	c := mustDial(t, e.addr, withCreds(creds[1]))
	if res := c.join("urn:r2", makeTD("urn:r2", "R2 replaced"), ""); res.Status != "accepted" {
		t.Fatalf("replace: %+v", res)
	}
	c.close()
	if _, err := e.reg.Put(t.Context(), "urn:http", makeTD("urn:http", "H"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	e.stop()

	retained := func(topic string, payload []byte) hub.BrokerRecord {
		m := storage.Message{ID: topic, T: storage.RetainedKey, TopicName: topic, Payload: payload,
			FixedHeader: mpackets.FixedHeader{Type: mpackets.Publish, Qos: 1, Retain: true}}
		raw, _ := m.MarshalBinary()
		return hub.BrokerRecord{Kind: recRetained, Key: topic, Value: raw}
	}
	db, err := store.Open(e.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ApplyBroker([]hub.BrokerRecord{
		{Kind: recRetained, Key: thingsPrefix + "urn:r1/td"}, // lost
		retained(thingsPrefix+"urn:r2/td", old),              // stale
		retained(thingsPrefix+"urn:gone/td", makeTD("urn:gone", "G")),
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	e.start()

	host, port, _ := net.SplitHostPort(e.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "-V", "mqttv5", "--retained-only", "-W", "5",
		"-C", "3", "-v", "-t", thingsPrefix+"+/td").CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_sub: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(got)
	var want []string
	for _, id := range ids {
		raw, err := e.reg.Raw(id)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, thingsPrefix+id+"/td "+string(raw))
	}
	if !slices.Equal(got, want) {
		t.Errorf("retained descriptions after the restart:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Exactly those: none of the Thing registered over HTTP nor of the
	// one no longer registered.
	if ms := e.b.server.Topics.Messages(thingsPrefix + "+/td"); len(ms) != len(ids) {
		var topics []string
		for _, m := range ms {
			topics = append(topics, m.TopicName)
		}
		t.Errorf("retained on …/td: %v", topics)
	}
}
