module github.com/eclipse-lmos/lmos-hub

go 1.26

require (
	filippo.io/edwards25519 v1.2.0
	github.com/VictoriaMetrics/metrics v1.45.0
	github.com/coder/websocket v1.8.15
	github.com/coreos/go-systemd/v22 v22.6.0
	github.com/eclipse/paho.golang v0.22.0
	github.com/fxamacker/cbor/v2 v2.9.0
	github.com/go-json-experiment/json v1.27.2
	github.com/google/uuid v1.6.0
	github.com/grandcat/zeroconf v1.0.0
	github.com/hdevalence/ed25519consensus v0.2.0
	github.com/miekg/dns v1.1.61
	github.com/mochi-mqtt/server/v2 v2.7.9
	github.com/mr-tron/base58 v1.2.0
	github.com/r3labs/sse/v2 v2.10.0
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.2
	github.com/theory/jsonpath v0.11.0
	go.etcd.io/bbolt v1.4.3
	go.yaml.in/yaml/v3 v3.0.4
	golang.org/x/net v0.33.0
	golang.org/x/sys v0.38.0
	golang.org/x/text v0.21.0
	golang.org/x/time v0.14.0
	gopkg.in/cenkalti/backoff.v1 v1.1.0
)

require (
	github.com/cenkalti/backoff v2.2.1+incompatible // indirect
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/rs/xid v1.4.0 // indirect
	github.com/valyala/fastrand v1.1.0 // indirect
	github.com/valyala/histogram v1.2.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/mod v0.18.0 // indirect
	golang.org/x/sync v0.10.0 // indirect
	golang.org/x/tools v0.22.0 // indirect
)
