package app

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/theory/jsonpath"
	"go.yaml.in/yaml/v3"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/mqtt"
	"github.com/eclipse-lmos/lmos-hub/web"
)

// Duration is a time.Duration written in YAML (and environment variables)
// as a Go duration string such as "10s", "5m" or "24h".
type Duration time.Duration

// String returns the Go duration syntax, e.g. "24h0m0s".
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes the duration as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New(`expected a duration such as "10s", "5m" or "24h"`)
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalText writes the duration as a Go duration string (JSON, logs).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

func parseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	// Whole days ("365d"), which Go's syntax lacks, for long validities.
	if d, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseUint(d, 10, 16); err == nil {
			return Duration(time.Duration(n) * 24 * time.Hour), nil
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf(`invalid duration %q (use Go duration syntax such as "10s", "5m" or "24h")`, s)
	}
	return Duration(v), nil
}

// Config is the hub's configuration. DefaultConfig gives the values used when
// nothing is configured; LoadConfig layers a YAML file, LMOS_HUB_* environment
// variables and flags over them.
type Config struct {
	DataDir string `yaml:"dataDir"` // default "./lmos-data"
	Hub     struct {
		Name string `yaml:"name"`
	} `yaml:"hub"` // default os.Hostname()
	HTTP            HTTPConfig       `yaml:"http"`
	MQTT            MQTTConfig       `yaml:"mqtt"`
	MDNS            MDNSConfig       `yaml:"mdns"`
	Join            JoinConfig       `yaml:"join"`
	Security        SecurityConfig   `yaml:"security"`
	Access          AccessConfig     `yaml:"access"`
	TLS             TLSConfig        `yaml:"tls"`
	AdminToken      string           `yaml:"adminToken"`
	Log             LogConfig        `yaml:"log"`
	Registry        RegistryConfig   `yaml:"registry"`
	Search          SearchConfig     `yaml:"search"`
	Groups          GroupsConfig     `yaml:"groups"`
	Sync            SyncConfig       `yaml:"sync"`
	Federation      FederationConfig `yaml:"federation"`
	Bridge          BridgeConfig     `yaml:"bridge"`          // the MQTT bridge (app/bridge.go)
	MCP             MCPConfig        `yaml:"mcp"`             // the MCP door (app/mcp.go)
	ShutdownTimeout Duration         `yaml:"shutdownTimeout"` // default 10s
}

// SyncConfig is the sync with a remote Thing Description Directory
// (PROTOCOL §9): any W3C WoT directory, another lmos-hub included.
type SyncConfig struct {
	// URL is the remote directory's base URL; "" syncs nothing.
	URL string `yaml:"url"`
	// Token is sent to it as a bearer token ("" sends none).
	Token string `yaml:"token"`
	// Pull is a JSONPath query (RFC 9535) over the array [TD] of each
	// remote Thing: the Things it selects anything from are mirrored here
	// read-only ("$" mirrors all); "" mirrors none.
	Pull string `yaml:"pull"`
	// Interval is how often a remote without a change feed is read
	// again, and how often the pushed copies are looked at for a refresh;
	// default 30s.
	Interval Duration `yaml:"interval"`
	// TTL is the registration.ttl of the copies pushed to URL; 0: 3 ×
	// Interval.
	TTL Duration `yaml:"ttl"`
}

// HTTPConfig configures the HTTP listener (directory API, proxy, dashboard).
type HTTPConfig struct {
	Addr           string   `yaml:"addr"`           // default ":8080"
	Private        bool     `yaml:"private"`        // deprecated: true is access.anonymous: none
	MaxBodyBytes   int64    `yaml:"maxBodyBytes"`   // default 262144
	WriteRate      float64  `yaml:"writeRate"`      // per-client writes per second, default 200; 0 disables the limit
	WriteBurst     int      `yaml:"writeBurst"`     // default 400
	AllowedOrigins []string `yaml:"allowedOrigins"` // CORS / WebSocket origins besides the hub's own
	// AllowedHosts are the names requests may carry in Host besides IP
	// addresses, localhost and the hub's own names (DNS rebinding guard):
	// exact names or "*.suffix"; ["*"] turns the check off.
	AllowedHosts []string `yaml:"allowedHosts"`
	ProxyTimeout Duration `yaml:"proxyTimeout"` // how long /proxy waits for a final result, default 30s
	// MaxStreamsPerClient bounds the event streams (SSE) one client
	// address holds open; default 64.
	MaxStreamsPerClient int `yaml:"maxStreamsPerClient"`
	// MaxStreamQueueBytes bounds the frames one event stream holds for a
	// client that has not read them yet; beyond it the stream is cut off.
	// Default 1 MiB.
	MaxStreamQueueBytes int      `yaml:"maxStreamQueueBytes"`
	WebSocket           WSConfig `yaml:"webSocket"` // the /ws gateway's limits
}

// WSConfig tunes the WebSocket gateway (PROTOCOL §10); zero values take
// the defaults.
type WSConfig struct {
	PingInterval Duration `yaml:"pingInterval"` // default 30s
	IdleTimeout  Duration `yaml:"idleTimeout"`  // default 5m
	MessageRate  float64  `yaml:"messageRate"`  // messages per second per connection, default 100
	MessageBurst int      `yaml:"messageBurst"` // default 200
	SendQueue    int      `yaml:"sendQueue"`    // messages waiting per connection, default 256
}

// MQTTConfig configures the embedded MQTT broker.
type MQTTConfig struct {
	Addr      string `yaml:"addr"`      // default ":1883"
	Anonymous bool   `yaml:"anonymous"` // default true
	// MaxQueuedBytes bounds each client's queue of messages waiting to be
	// written; QoS 0 messages beyond it are dropped (counted), QoS 1/2
	// ones wait in the session. Default 1 MiB.
	MaxQueuedBytes int `yaml:"maxQueuedBytes"`
	// SlowClientTimeout is how long a client may leave its full queue
	// unread, or a publisher waiting on its full session, before it is
	// disconnected (counted). Default 30s.
	SlowClientTimeout Duration `yaml:"slowClientTimeout"`
	// ConnectTimeout is how long a new connection may take to send its
	// CONNECT before it is closed (counted). Default 10s.
	ConnectTimeout Duration `yaml:"connectTimeout"`
}

// minQueuedBytes is the smallest mqtt.maxQueuedBytes: a few small
// messages (a larger one still goes out when nothing else waits).
const minQueuedBytes = 4 << 10

// MDNSConfig configures DNS-SD advertising and browsing.
type MDNSConfig struct {
	Enabled     bool     `yaml:"enabled"`     // default true
	Interfaces  []string `yaml:"interfaces"`  // empty: all multicast interfaces
	ForgetAfter Duration `yaml:"forgetAfter"` // default 24h
}

// JoinConfig configures how new agents are admitted.
type JoinConfig struct {
	Mode string `yaml:"mode"` // open|approve|closed, default open
	// PendingTTL is how long a join parked for approval (join.mode
	// approve) waits for a decision before it expires; default 24h.
	PendingTTL Duration `yaml:"pendingTTL"`
}

// Bounds of join.pendingTTL: an administrator needs some minutes to
// decide, and an entry kept for more than a year is one forgotten.
const (
	minPendingTTL = time.Minute
	maxPendingTTL = 365 * 24 * time.Hour
)

// AccessConfig configures the one access policy of every door (hub.Access).
type AccessConfig struct {
	// Anonymous is what clients without credentials may do: none, read
	// (the directory, property values, events) or operate (read, write
	// properties, invoke actions). Default operate; join.mode approve and
	// closed cap it at read.
	Anonymous string `yaml:"anonymous"`
}

// AnonymousAccess is the effective access.anonymous: http.private: true,
// which predates it, means none.
func (c Config) AnonymousAccess() string {
	if c.HTTP.Private {
		return hub.AnonymousNone
	}
	return c.Access.Anonymous
}

// SecurityConfig configures signature requirements (PROTOCOL §6).
type SecurityConfig struct {
	// RequireSigned refuses unsigned Thing Descriptions on every door.
	RequireSigned bool `yaml:"requireSigned"`
	// VerifyRate and VerifyBurst bound proof verifications per client
	// address (per second, burst); default 50 and 100.
	VerifyRate  float64 `yaml:"verifyRate"`
	VerifyBurst int     `yaml:"verifyBurst"`
	// MaxClockSkew is how far in the future a proof's created may lie;
	// default 5m.
	MaxClockSkew Duration `yaml:"maxClockSkew"`
}

// TLSConfig configures HTTPS, WSS and MQTTS (PROTOCOL §10 "TLS").
type TLSConfig struct {
	Enabled bool `yaml:"enabled"` // default false
	// Only closes the plain listeners (http.addr, mqtt.addr).
	Only      bool   `yaml:"only"`
	HTTPSAddr string `yaml:"httpsAddr"` // default ":8443"; also WSS (/ws, /mqtt)
	MQTTSAddr string `yaml:"mqttsAddr"` // default ":8883"
	// Cert and Key are the user's PEM files; both empty: a self-signed
	// certificate generated on first start in the data directory.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// ReloadInterval is how often the files are checked for a new
	// certificate; default 10s.
	ReloadInterval Duration `yaml:"reloadInterval"`
}

// LogConfig configures log/slog output.
type LogConfig struct {
	Format string `yaml:"format"` // text|json, default text
	Level  string `yaml:"level"`  // debug|info|warn|error, default info
}

// RegistryConfig configures the Thing registry.
type RegistryConfig struct {
	EventLogSize int `yaml:"eventLogSize"` // default 1000
	MaxThings    int `yaml:"maxThings"`    // default 1024; 0 = unlimited
	// MaxDepth bounds the nesting of objects and arrays in a TD on every
	// door; default 32 (the CBOR decoder's limit too).
	MaxDepth int `yaml:"maxDepth"`
	// MaxTDBytes bounds one Thing Description on every door (HTTP, MQTT,
	// WebSocket, mDNS); default 262144.
	MaxTDBytes int `yaml:"maxTDBytes"`
	// MaxBytes bounds the stored documents' total size; default 32 MiB,
	// 0 = unlimited.
	MaxBytes int64 `yaml:"maxBytes"`
	// MaxThingsPerSource bounds the Things one address registers
	// anonymously; default 64, 0 = unlimited.
	MaxThingsPerSource int `yaml:"maxThingsPerSource"`
}

// SearchConfig bounds what one search costs (PROTOCOL §10, "Limits:
// search"); see hub.SearchLimits for why each default.
// FederationConfig configures the paired hubs of the LAN (PROTOCOL §9
// "Federation"); the peers themselves are paired through /api/peers.
type FederationConfig struct {
	// MaxPeers bounds the hubs this one may be paired with; default 32.
	// Each holds a mirror (a change feed) open here.
	MaxPeers int `yaml:"maxPeers"`
}

// GroupsConfig configures agent groups (PROTOCOL §7).
type GroupsConfig struct {
	// CredentialValidity is how long a membership credential is valid
	// (validUntil - validFrom); default 7d. A member renews by fetching
	// it again; a revoked credential's status list entry is reused once
	// it has expired.
	CredentialValidity Duration `yaml:"credentialValidity"`
	// StatusListValidity is how long a signed status list is valid
	// (validUntil - validFrom); default 10m. A copy fetched before a
	// revocation verifies for at most this long.
	StatusListValidity Duration `yaml:"statusListValidity"`
	// IssueRate is how many membership credentials one token (not admin)
	// or one address (self-joins) may have issued per hour, IssueBurst at
	// once; defaults 128 and 1024. 0 disables the pacing.
	IssueRate  float64 `yaml:"issueRate"`
	IssueBurst int     `yaml:"issueBurst"`
	// StatusListURL is the absolute URL every credential names for its
	// status list; empty: the HTTP listener's (http://<host>:<port>, or
	// https when tls.only) + /credentials/status/memberships. Set it when
	// verifiers reach the hub by a name the listener does not know.
	StatusListURL string `yaml:"statusListURL"`
	// ActionOutputBytes bounds the members' outputs all group actions on
	// the hub hold at once; default 32 MiB. An output beyond it is dropped
	// from its result (error unavailable, 503).
	ActionOutputBytes int `yaml:"actionOutputBytes"`
}

type SearchConfig struct {
	MaxNodes       int64    `yaml:"maxNodes"`       // nodes one query visits, default 10000000
	MaxResultBytes int64    `yaml:"maxResultBytes"` // default 16 MiB
	Timeout        Duration `yaml:"timeout"`        // wall time, waiting included, default 5s
	MaxQueryBytes  int      `yaml:"maxQueryBytes"`  // default 1024
	MaxDescendants int      `yaml:"maxDescendants"` // descendant segments (..) per JSONPath query, default 2
	// MaxConcurrentPerClient: searches one client address runs at once,
	// default 2; more get 429 at once.
	MaxConcurrentPerClient int `yaml:"maxConcurrentPerClient"`
	// MaxConcurrent: searches running on the hub at once, default the
	// number of cores (GOMAXPROCS); more wait within their timeout.
	MaxConcurrent int `yaml:"maxConcurrent"`
}

// Allowed values of the enumerated settings.
var (
	joinModes  = []string{"open", "approve", "closed"}
	logFormats = []string{"text", "json"}
	logLevels  = []string{"debug", "info", "warn", "error"}
)

// maxHubNameBytes is the longest hub name: it becomes a DNS-SD instance label.
const maxHubNameBytes = 63

// DefaultConfig returns the configuration used when nothing is configured:
// the hub runs with it as is.
func DefaultConfig() Config {
	var c Config
	c.DataDir = "./lmos-data"
	c.Hub.Name = defaultHubName()
	c.HTTP = HTTPConfig{Addr: ":8080", MaxBodyBytes: 256 << 10, WriteRate: 200, WriteBurst: 400, ProxyTimeout: Duration(30 * time.Second), MaxStreamsPerClient: 64,
		MaxStreamQueueBytes: web.DefaultMaxStreamQueueBytes,
		AllowedHosts:        []string{}} // printed as [] by `config print`, a list to fill in
	c.MQTT = MQTTConfig{Addr: ":1883", Anonymous: true, MaxQueuedBytes: mqtt.DefaultMaxQueuedBytes,
		SlowClientTimeout: Duration(mqtt.DefaultSlowClientTimeout), ConnectTimeout: Duration(mqtt.DefaultConnectTimeout)}
	c.MDNS = MDNSConfig{Enabled: true, ForgetAfter: Duration(24 * time.Hour)}
	c.Join = JoinConfig{Mode: "open", PendingTTL: Duration(hub.DefaultPendingTTL)}
	c.Security = SecurityConfig{VerifyRate: hub.DefaultVerifyRate, VerifyBurst: hub.DefaultVerifyBurst, MaxClockSkew: Duration(hub.DefaultMaxClockSkew)}
	c.Access = AccessConfig{Anonymous: hub.AnonymousOperate}
	c.TLS = TLSConfig{HTTPSAddr: ":8443", MQTTSAddr: ":8883", ReloadInterval: Duration(10 * time.Second)}
	c.Log = LogConfig{Format: "text", Level: "info"}
	c.Registry = RegistryConfig{EventLogSize: 1000, MaxDepth: hub.DefaultMaxDepth, MaxThings: 1024, MaxTDBytes: hub.DefaultMaxTDBytes,
		MaxBytes: 32 << 20, MaxThingsPerSource: 64}
	c.Search = SearchConfig{MaxNodes: hub.DefaultSearchMaxNodes, MaxResultBytes: hub.DefaultSearchMaxResultBytes,
		Timeout: Duration(hub.DefaultSearchTimeout), MaxQueryBytes: hub.DefaultSearchMaxQueryBytes,
		MaxDescendants: hub.DefaultSearchMaxDescendants, MaxConcurrentPerClient: hub.DefaultSearchMaxPerClient,
		MaxConcurrent: runtime.GOMAXPROCS(0)}
	c.Groups = GroupsConfig{CredentialValidity: Duration(hub.DefaultCredentialValidity),
		StatusListValidity: Duration(hub.DefaultStatusListValidity),
		IssueRate:          hub.DefaultIssueRate, IssueBurst: hub.DefaultIssueBurst,
		ActionOutputBytes: hub.DefaultGroupActionHeld}
	c.Sync = SyncConfig{Interval: Duration(30 * time.Second)}
	c.Federation = FederationConfig{MaxPeers: hub.DefaultMaxPeers}
	c.Bridge = defaultBridgeConfig()
	c.MCP = defaultMCPConfig()
	c.ShutdownTimeout = Duration(10 * time.Second)
	return c
}

// defaultHubName is the host name, cut to a valid hub name.
func defaultHubName() string {
	name, err := os.Hostname()
	if err != nil {
		return "lmos-hub"
	}
	name = strings.TrimSpace(name)
	for len(name) > maxHubNameBytes {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if checkHubName(name) != nil {
		return "lmos-hub"
	}
	return name
}

// Redacted returns a copy safe to print: AdminToken replaced by "<redacted>"
// when set. Slices are copied too.
func (c Config) Redacted() Config {
	if c.AdminToken != "" {
		c.AdminToken = "<redacted>"
	}
	if u, err := url.Parse(c.Sync.URL); err == nil && u.User != nil {
		u.User = url.User("redacted")
		c.Sync.URL = u.String()
	}
	if c.HTTP.AllowedOrigins != nil {
		c.HTTP.AllowedOrigins = append([]string{}, c.HTTP.AllowedOrigins...)
	}
	if c.HTTP.AllowedHosts != nil {
		c.HTTP.AllowedHosts = append([]string{}, c.HTTP.AllowedHosts...)
	}
	if c.MDNS.Interfaces != nil {
		c.MDNS.Interfaces = append([]string{}, c.MDNS.Interfaces...)
	}
	if c.Sync.Token != "" {
		c.Sync.Token = "<redacted>"
	}
	c.Bridge = c.Bridge.redacted()
	return c
}

// Validate says exactly which setting is wrong, naming it as in the YAML
// file (e.g. `join.mode: "maybe" is not one of open, approve, closed`). It
// reports every problem, joined with errors.Join; nil when all is well.
func (c Config) Validate() error {
	var errs []error
	bad := func(setting string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", setting, err))
		}
	}
	bad("dataDir", checkNonEmpty(c.DataDir))
	bad("hub.name", checkHubName(c.Hub.Name))
	c.validateHTTP(bad)
	c.validateMQTT(bad)
	c.validateTLS(bad)
	for i, name := range c.MDNS.Interfaces {
		if strings.TrimSpace(name) == "" {
			bad(fmt.Sprintf("mdns.interfaces[%d]", i), errors.New("must be an interface name such as eth0, not empty"))
		}
	}
	if c.MDNS.ForgetAfter <= 0 {
		bad("mdns.forgetAfter", fmt.Errorf("must be a duration greater than 0 such as \"24h\" (got %s)", c.MDNS.ForgetAfter))
	}
	bad("join.mode", checkOneOf(c.Join.Mode, joinModes))
	bad("join.pendingTTL", checkPendingTTL(c.Join.PendingTTL))
	if c.Security.VerifyRate <= 0 {
		bad("security.verifyRate", fmt.Errorf("must be greater than 0 verifications per second (got %v)", c.Security.VerifyRate))
	}
	if c.Security.VerifyBurst < 1 {
		bad("security.verifyBurst", fmt.Errorf("must be at least 1 (got %d)", c.Security.VerifyBurst))
	}
	if c.Security.MaxClockSkew <= 0 {
		bad("security.maxClockSkew", fmt.Errorf("must be a duration greater than 0 such as \"5m\" (got %s)", c.Security.MaxClockSkew))
	}
	bad("access.anonymous", checkOneOf(c.Access.Anonymous, hub.AnonymousLevels))
	bad("adminToken", checkToken(c.AdminToken))
	bad("log.format", checkOneOf(c.Log.Format, logFormats))
	bad("log.level", checkOneOf(c.Log.Level, logLevels))
	c.validateLimits(bad)
	c.validateGroups(bad)
	c.validateSync(bad)
	if n := c.Federation.MaxPeers; n < 1 || n > 1024 {
		bad("federation.maxPeers", fmt.Errorf("must be from 1 to 1024 (got %d)", n))
	}
	c.validateBridge(bad)
	c.validateMCP(bad)
	if c.ShutdownTimeout <= 0 {
		bad("shutdownTimeout", fmt.Errorf("must be a duration greater than 0 such as \"10s\" (got %s)", c.ShutdownTimeout))
	}
	return errors.Join(errs...)
}

// validateGroups checks the groups settings; bad records a bad one.
func (c Config) validateGroups(bad func(string, error)) {
	if v := time.Duration(c.Groups.CredentialValidity); v < time.Hour || v > 10*365*24*time.Hour {
		bad("groups.credentialValidity", fmt.Errorf("must be a duration from 1h to 3650d such as \"7d\" (got %s)", c.Groups.CredentialValidity))
	}
	if v := time.Duration(c.Groups.StatusListValidity); v < time.Minute || v > 24*time.Hour {
		bad("groups.statusListValidity", fmt.Errorf("must be a duration from 1m to 24h such as \"10m\" (got %s)", c.Groups.StatusListValidity))
	}
	if r := c.Groups.IssueRate; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
		bad("groups.issueRate", fmt.Errorf("must be a number of credentials per hour ≥ 0, 0 disables the pacing (got %v)", r))
	}
	if b := c.Groups.IssueBurst; b < 1 || b > hub.MaxStatusListEntries {
		bad("groups.issueBurst", fmt.Errorf("must be from 1 to %d (got %d)", hub.MaxStatusListEntries, b))
	}
	if c.Groups.ActionOutputBytes < 1 {
		bad("groups.actionOutputBytes", fmt.Errorf("must be at least 1 byte (got %d)", c.Groups.ActionOutputBytes))
	}
	if u := c.Groups.StatusListURL; u != "" {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.Fragment != "" {
			bad("groups.statusListURL", fmt.Errorf("must be an absolute http or https URL without a fragment (got %q)", u))
		}
	}
}

// validateSync checks the sync settings; bad records a bad one.
func (c Config) validateSync(bad func(string, error)) {
	if u := c.Sync.URL; u != "" {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "" {
			bad("sync.url", fmt.Errorf("must be the http or https base URL of a Thing Description Directory such as \"http://hub-2:8080\" (got %q)", u))
		}
	}
	if c.Sync.Pull != "" {
		if c.Sync.URL == "" {
			bad("sync.pull", errors.New("needs sync.url: the directory to pull from"))
		}
		if _, err := jsonpath.Parse(c.Sync.Pull); err != nil {
			bad("sync.pull", fmt.Errorf("is not a JSONPath query such as \"$[?@.title == 'Lamp']\" (\"$\" pulls every Thing): %w", err))
		}
	}
	if strings.IndexFunc(c.Sync.Token, func(r rune) bool { return r <= ' ' || r == 0x7f || r > unicode.MaxASCII }) >= 0 {
		bad("sync.token", errors.New("must be printable ASCII without spaces (it travels in an Authorization: Bearer header)"))
	}
	if time.Duration(c.Sync.Interval) < time.Second {
		bad("sync.interval", fmt.Errorf("must be a duration of at least 1s such as \"30s\" (got %s)", c.Sync.Interval))
	}
	if c.Sync.TTL != 0 && c.Sync.TTL < 2*c.Sync.Interval {
		bad("sync.ttl", fmt.Errorf("must be 0 (3 × sync.interval) or at least twice sync.interval, %s, so a copy is refreshed before it expires (got %s)",
			2*c.Sync.Interval, c.Sync.TTL))
	}
	if time.Duration(c.Sync.TTL) > time.Duration(hub.MaxTTLSeconds)*time.Second {
		bad("sync.ttl", fmt.Errorf("must be at most 3650d (got %s)", c.Sync.TTL))
	}
}

// validateHTTP checks the http settings; bad records a bad one.
func (c Config) validateHTTP(bad func(string, error)) {
	bad("http.addr", checkAddr(c.HTTP.Addr))
	if c.HTTP.MaxBodyBytes <= 0 {
		bad("http.maxBodyBytes", fmt.Errorf("must be greater than 0 (got %d)", c.HTTP.MaxBodyBytes))
	}
	switch r := c.HTTP.WriteRate; {
	case math.IsNaN(r) || math.IsInf(r, 0) || r < 0:
		bad("http.writeRate", fmt.Errorf("must be a number of writes per second ≥ 0, 0 disables the limit (got %v)", r))
	case r > 0 && c.HTTP.WriteBurst < 1:
		bad("http.writeBurst", fmt.Errorf("must be at least 1 while http.writeRate is above 0 (got %d)", c.HTTP.WriteBurst))
	}
	for i, o := range c.HTTP.AllowedOrigins {
		bad(fmt.Sprintf("http.allowedOrigins[%d]", i), checkOrigin(o))
	}
	for i, h := range c.HTTP.AllowedHosts {
		bad(fmt.Sprintf("http.allowedHosts[%d]", i), checkAllowedHost(h))
	}
	if c.HTTP.MaxStreamQueueBytes < 64<<10 {
		bad("http.maxStreamQueueBytes", fmt.Errorf("must be at least 65536 (got %d)", c.HTTP.MaxStreamQueueBytes))
	}
	if c.HTTP.MaxStreamsPerClient < 1 {
		bad("http.maxStreamsPerClient", fmt.Errorf("must be at least 1 (got %d)", c.HTTP.MaxStreamsPerClient))
	}
	if c.HTTP.ProxyTimeout <= 0 {
		bad("http.proxyTimeout", fmt.Errorf("must be a duration greater than 0 such as \"30s\" (got %s)", c.HTTP.ProxyTimeout))
	}
}

// validateMQTT checks the mqtt settings; bad records a bad one.
func (c Config) validateMQTT(bad func(string, error)) {
	bad("mqtt.addr", checkAddr(c.MQTT.Addr))
	if c.MQTT.MaxQueuedBytes < minQueuedBytes {
		bad("mqtt.maxQueuedBytes", fmt.Errorf("must be at least %d bytes (got %d)", minQueuedBytes, c.MQTT.MaxQueuedBytes))
	}
	if c.MQTT.ConnectTimeout <= 0 {
		bad("mqtt.connectTimeout", fmt.Errorf("must be a duration greater than 0 such as \"10s\" (got %s)", c.MQTT.ConnectTimeout))
	}
	if c.MQTT.SlowClientTimeout <= 0 {
		bad("mqtt.slowClientTimeout", fmt.Errorf("must be a duration greater than 0 such as \"30s\" (got %s)", c.MQTT.SlowClientTimeout))
	}
}

// validateTLS checks the tls settings; bad records a bad one.
func (c Config) validateTLS(bad func(string, error)) {
	bad("tls.httpsAddr", checkAddr(c.TLS.HTTPSAddr))
	bad("tls.mqttsAddr", checkAddr(c.TLS.MQTTSAddr))
	if c.TLS.Only && !c.TLS.Enabled {
		bad("tls.only", errors.New("needs tls.enabled: true (it closes the plain listeners, leaving only the TLS ones)"))
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		bad("tls.cert", errors.New("tls.cert and tls.key go together: give both files, or neither for a self-signed certificate in the data directory"))
	}
	if c.TLS.ReloadInterval <= 0 {
		bad("tls.reloadInterval", fmt.Errorf("must be a duration greater than 0 such as \"10s\" (got %s)", c.TLS.ReloadInterval))
	}
}

// validateLimits checks the registry's and search's limits; bad records a
// bad one.
func (c Config) validateLimits(bad func(string, error)) {
	if c.Registry.EventLogSize < 1 {
		bad("registry.eventLogSize", fmt.Errorf("must be at least 1 (got %d)", c.Registry.EventLogSize))
	}
	if c.Registry.MaxThings < 0 {
		bad("registry.maxThings", fmt.Errorf("must be 0 (unlimited) or more (got %d)", c.Registry.MaxThings))
	}
	if c.Registry.MaxTDBytes < 1 || c.Registry.MaxTDBytes > mqtt.MaxPacketSize {
		bad("registry.maxTDBytes", fmt.Errorf("must be from 1 to %d (got %d)", mqtt.MaxPacketSize, c.Registry.MaxTDBytes))
	}
	if c.Registry.MaxBytes < 0 {
		bad("registry.maxBytes", fmt.Errorf("must be 0 (unlimited) or more (got %d)", c.Registry.MaxBytes))
	}
	if c.Registry.MaxThingsPerSource < 0 {
		bad("registry.maxThingsPerSource", fmt.Errorf("must be 0 (unlimited) or more (got %d)", c.Registry.MaxThingsPerSource))
	}
	if c.Registry.MaxDepth < 2 {
		bad("registry.maxDepth", fmt.Errorf("must be at least 2 (got %d)", c.Registry.MaxDepth))
	}
	atLeast1 := func(name string, v int64) {
		if v < 1 {
			bad(name, fmt.Errorf("must be at least 1 (got %d)", v))
		}
	}
	atLeast1("search.maxNodes", c.Search.MaxNodes)
	atLeast1("search.maxResultBytes", c.Search.MaxResultBytes)
	atLeast1("search.maxQueryBytes", int64(c.Search.MaxQueryBytes))
	atLeast1("search.maxDescendants", int64(c.Search.MaxDescendants))
	atLeast1("search.maxConcurrentPerClient", int64(c.Search.MaxConcurrentPerClient))
	atLeast1("search.maxConcurrent", int64(c.Search.MaxConcurrent))
	if c.Search.Timeout <= 0 {
		bad("search.timeout", fmt.Errorf("must be a duration greater than 0 such as \"5s\" (got %s)", c.Search.Timeout))
	}
}

// checkPendingTTL accepts a join.pendingTTL from 1m to 365d.
func checkPendingTTL(d Duration) error {
	if time.Duration(d) < minPendingTTL || time.Duration(d) > maxPendingTTL {
		return fmt.Errorf("must be a duration from 1m to 365d such as \"24h\" (got %s)", d)
	}
	return nil
}

func checkNonEmpty(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("must not be empty")
	}
	return nil
}

func checkOneOf(v string, allowed []string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
}

// checkAddr accepts HOST:PORT with a numeric port 0..65535 (0 picks a free
// port); HOST may be empty (all interfaces).
func checkAddr(addr string) error {
	if addr == "" {
		return errors.New(`must not be empty (use HOST:PORT, e.g. ":8080" for all interfaces)`)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Errorf("%s %q (use HOST:PORT, e.g. \":8080\")", ae.Err, addr)
		}
		return fmt.Errorf("%q is not HOST:PORT: %v", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q in %q is not a number from 0 to 65535", port, addr)
	}
	return nil
}

func checkHubName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errors.New("must not be empty")
	case len(name) > maxHubNameBytes:
		return fmt.Errorf("%q is %d bytes long; the limit is %d bytes (the name becomes an mDNS instance label)", name, len(name), maxHubNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%q is not valid UTF-8", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%q contains control characters", name)
	}
	return nil
}

// checkToken accepts any token that can travel in an Authorization header.
func checkToken(tok string) error {
	if tok == "" {
		return nil
	}
	if strings.IndexFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f || r > unicode.MaxASCII }) >= 0 {
		return errors.New("must be printable ASCII without spaces (it travels in an Authorization: Bearer header)")
	}
	if len(tok) < hub.MinTokenLength {
		return fmt.Errorf("must be at least %d characters (use `lmos-hub token create` or a long random string)", hub.MinTokenLength)
	}
	return nil
}

// checkOrigin accepts "*" or an origin such as "https://example.com:8443".
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q is not an origin such as \"https://example.com:8443\" or \"*\"", o)
	}
	return nil
}

// checkAllowedHost accepts "*", a host name, or "*." and a host name: no
// scheme, port or path (the Host check ignores the port).
func checkAllowedHost(h string) error {
	if h == "*" {
		return nil
	}
	name := strings.TrimSuffix(strings.TrimPrefix(h, "*."), ".")
	ok := name != "" && len(name) <= 253
	for _, label := range strings.Split(name, ".") {
		ok = ok && label != "" && len(label) <= 63
		for _, r := range label {
			ok = ok && (r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}
	}
	if !ok {
		return fmt.Errorf("%q is not a host name such as \"hub.example.com\", a wildcard such as \"*.example.com\" or \"*\"", h)
	}
	return nil
}

// A serveSetting is one setting that has a flag, and the short name of
// its environment variable it had before every setting had one (see
// configenv.go).
type serveSetting struct {
	flag, env string
	path      string // the YAML name
	usage     string // flag.UnquoteUsage picks the `NAME` in back quotes
	isBool    bool
	set       func(c *Config, v string) error
}

var serveSettings = []serveSetting{
	{flag: "data-dir", path: "dataDir", env: "LMOS_HUB_DATA_DIR", usage: "store the hub's data in `DIR` (default ./lmos-data)",
		set: func(c *Config, v string) error { c.DataDir = v; return checkNonEmpty(v) }},
	{flag: "http-addr", path: "http.addr", env: "LMOS_HUB_HTTP_ADDR", usage: "listen for HTTP on `HOST:PORT`; port 0 picks a free port (default :8080)",
		set: func(c *Config, v string) error { c.HTTP.Addr = v; return checkAddr(v) }},
	{flag: "mqtt-addr", path: "mqtt.addr", env: "LMOS_HUB_MQTT_ADDR", usage: "listen for MQTT on `HOST:PORT`; port 0 picks a free port (default :1883)",
		set: func(c *Config, v string) error { c.MQTT.Addr = v; return checkAddr(v) }},
	{flag: "mdns", path: "mdns.enabled", env: "LMOS_HUB_MDNS", isBool: true, usage: "advertise the hub and discover agents over mDNS: --mdns=true|false (default true)",
		set: func(c *Config, v string) error {
			return setBool(&c.MDNS.Enabled, v)
		}},
	{flag: "tls", path: "tls.enabled", env: "LMOS_HUB_TLS", isBool: true, usage: "serve HTTPS, WSS and MQTTS too: --tls=true|false (default false)",
		set: func(c *Config, v string) error { return setBool(&c.TLS.Enabled, v) }},
	{flag: "tls-only", path: "tls.only", env: "LMOS_HUB_TLS_ONLY", isBool: true, usage: "close the plain HTTP and MQTT listeners: --tls-only=true|false (default false)",
		set: func(c *Config, v string) error { return setBool(&c.TLS.Only, v) }},
	{flag: "https-addr", path: "tls.httpsAddr", env: "LMOS_HUB_HTTPS_ADDR", usage: "listen for HTTPS and WSS on `HOST:PORT` when TLS is on (default :8443)",
		set: func(c *Config, v string) error { c.TLS.HTTPSAddr = v; return checkAddr(v) }},
	{flag: "mqtts-addr", path: "tls.mqttsAddr", env: "LMOS_HUB_MQTTS_ADDR", usage: "listen for MQTT over TLS on `HOST:PORT` when TLS is on (default :8883)",
		set: func(c *Config, v string) error { c.TLS.MQTTSAddr = v; return checkAddr(v) }},
	{flag: "tls-cert", path: "tls.cert", env: "LMOS_HUB_TLS_CERT", usage: "serve the PEM certificate `FILE` (with --tls-key; default a self-signed one in the data dir)",
		set: func(c *Config, v string) error { c.TLS.Cert = v; return nil }},
	{flag: "tls-key", path: "tls.key", env: "LMOS_HUB_TLS_KEY", usage: "the PEM private key `FILE` of --tls-cert",
		set: func(c *Config, v string) error { c.TLS.Key = v; return nil }},
	{flag: "join-mode", path: "join.mode", env: "LMOS_HUB_JOIN_MODE", usage: "admit new agents: `open|approve|closed` (default open)",
		set: func(c *Config, v string) error { c.Join.Mode = v; return checkOneOf(v, joinModes) }},
	{flag: "join-pending-ttl", path: "join.pendingTTL", env: "LMOS_HUB_JOIN_PENDING_TTL", usage: "let a join parked for approval wait `DURATION` for a decision, 1m to 365d (default 24h)",
		set: func(c *Config, v string) error {
			d, err := parseDuration(v)
			if err != nil {
				return err
			}
			c.Join.PendingTTL = d
			return checkPendingTTL(d)
		}},
	{flag: "access-anonymous", path: "access.anonymous", env: "LMOS_HUB_ACCESS_ANONYMOUS", usage: "what clients without credentials may do: `none|read|operate` (default operate)",
		set: func(c *Config, v string) error {
			c.Access.Anonymous = v
			return checkOneOf(v, hub.AnonymousLevels)
		}},
	{flag: "admin-token", path: "adminToken", env: "LMOS_HUB_ADMIN_TOKEN", usage: "install `TOKEN` as an admin token (for provisioning and automation)",
		set: func(c *Config, v string) error { c.AdminToken = v; return checkToken(v) }},
	{flag: "log-format", path: "log.format", env: "LMOS_HUB_LOG_FORMAT", usage: "log as `text|json` (default text)",
		set: func(c *Config, v string) error { c.Log.Format = v; return checkOneOf(v, logFormats) }},
	{flag: "log-level", path: "log.level", env: "LMOS_HUB_LOG_LEVEL", usage: "log at `debug|info|warn|error` (default info)",
		set: func(c *Config, v string) error { c.Log.Level = v; return checkOneOf(v, logLevels) }},
	{flag: "hub-name", path: "hub.name", env: "LMOS_HUB_NAME", usage: "call the hub `NAME` (mDNS instance, dashboard; default the host name)",
		set: func(c *Config, v string) error { c.Hub.Name = v; return checkHubName(v) }},
}

// setBool sets *dst from a boolean setting's text.
func setBool(dst *bool, v string) error {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%q is not a boolean (use true or false)", v)
	}
	*dst = b
	return nil
}

// settingFlag is the flag.Value of a serveSetting. Set checks the value at
// parse time (so the flag package names the flag in its error) and keeps it;
// LoadConfig applies it after the file and the environment.
type settingFlag struct {
	s   *serveSetting
	raw string
}

func (f *settingFlag) String() string {
	if f == nil {
		return ""
	}
	return f.raw
}

func (f *settingFlag) Set(v string) error {
	var scratch Config
	if err := f.s.set(&scratch, v); err != nil {
		return err
	}
	f.raw = v
	return nil
}

func (f *settingFlag) IsBoolFlag() bool { return f != nil && f.s != nil && f.s.isBool }

// newServeFlagSet defines the flags of `lmos-hub [serve]` (and of
// `lmos-hub config print`). Its output is discarded: callers report errors.
func newServeFlagSet(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("config", "", "read settings from the YAML configuration `FILE` (env LMOS_HUB_CONFIG)")
	for i := range serveSettings {
		s := &serveSettings[i]
		fs.Var(&settingFlag{s: s}, s.flag, s.usage+" (env "+s.env+")")
	}
	return fs, configPath
}

// PrintServeFlags writes the flag list of `lmos-hub [serve]` to w.
func PrintServeFlags(w io.Writer) {
	fs, _ := newServeFlagSet("serve")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nPrecedence: defaults < YAML file < LMOS_HUB_* environment variables < flags.")
	fmt.Fprintln(w, "Every setting of the YAML file has a variable (registry.maxThings: LMOS_HUB_REGISTRY_MAXTHINGS);")
	fmt.Fprintln(w, "lmos-hub config env lists them.")
}

// LoadConfig builds the effective configuration for `lmos-hub [serve]` from,
// in increasing precedence: defaults, the YAML file named by --config (or
// LMOS_HUB_CONFIG), LMOS_HUB_* environment variables (every setting has
// one, EnvVars), flags. args are the
// arguments after the subcommand; getenv is os.Getenv in production. Unknown
// YAML keys are an error naming the key. The result is validated. With -h or
// --help the error is flag.ErrHelp (print PrintServeFlags then).
func LoadConfig(args []string, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	fs, configFlag := newServeFlagSet("serve")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		hint := ""
		if i := len(args) - fs.NArg() - 1; i >= 0 {
			if f := fs.Lookup(strings.TrimLeft(args[i], "-")); f != nil {
				if bf, ok := f.Value.(*settingFlag); ok && bf.IsBoolFlag() {
					hint = fmt.Sprintf(" (write boolean flags with =, e.g. --%s=false)", f.Name)
				}
			}
		}
		return Config{}, fmt.Errorf("unexpected argument %q: the hub takes only flags%s", fs.Arg(0), hint)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg := DefaultConfig()

	path := getenv("LMOS_HUB_CONFIG")
	if set["config"] {
		path = *configFlag
	}
	if path != "" {
		if err := loadConfigFile(path, &cfg); err != nil {
			return Config{}, err
		}
	}

	fromEnv, err := applyEnv(&cfg, getenv)
	if err != nil {
		return Config{}, err
	}

	fs.Visit(func(f *flag.Flag) {
		if sf, ok := f.Value.(*settingFlag); ok {
			_ = sf.s.set(&cfg, sf.raw) // checked by Set during Parse
			delete(fromEnv, sf.s.path)
		}
	})

	if err := cfg.Validate(); err != nil {
		return Config{}, nameEnvErrors(err, fromEnv)
	}
	return cfg, nil
}

// loadConfigFile decodes the YAML file at path over cfg.
func loadConfigFile(path string, cfg *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cannot read configuration file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err = dec.Decode(cfg)
	if errors.Is(err, io.EOF) {
		return nil // empty file: nothing configured
	}
	if err != nil {
		// Explain with the full name of the setting where possible.
		var root yaml.Node
		if yaml.Unmarshal(data, &root) == nil {
			if errs := yamlConfigErrors(&root, reflect.TypeFor[Config](), ""); len(errs) > 0 {
				for i, e := range errs {
					errs[i] = fmt.Errorf("configuration file %s: %w", path, e)
				}
				return errors.Join(errs...)
			}
		}
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			errs := make([]error, len(te.Errors))
			for i, msg := range te.Errors {
				errs[i] = fmt.Errorf("configuration file %s: %s", path, msg)
			}
			return errors.Join(errs...)
		}
		return fmt.Errorf("configuration file %s: %w", path, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("configuration file %s: holds more than one YAML document; keep one", path)
	}
	return nil
}

// yamlConfigErrors walks n against the struct type t and reports unknown keys
// and undecodable values by their dotted setting name and line.
func yamlConfigErrors(n *yaml.Node, t reflect.Type, prefix string) []error {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.ShortTag() == "!!null" {
		return nil
	}
	where := "the configuration"
	if prefix != "" {
		where = prefix
	}
	if n.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("line %d: %s must be a mapping of settings", n.Line, where)}
	}
	fields := map[string]reflect.StructField{}
	var known []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = f
		known = append(known, name)
	}
	sort.Strings(known)
	var errs []error
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		full := k.Value
		if prefix != "" {
			full = prefix + "." + k.Value
		}
		f, ok := fields[k.Value]
		if !ok {
			errs = append(errs, fmt.Errorf("line %d: unknown setting %q (known settings in %s: %s)",
				k.Line, full, where, strings.Join(known, ", ")))
			continue
		}
		if f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(reflect.TypeFor[yaml.Unmarshaler]()) {
			errs = append(errs, yamlConfigErrors(v, f.Type, full)...)
			continue
		}
		if err := v.Decode(reflect.New(f.Type).Interface()); err != nil {
			var te *yaml.TypeError
			if errors.As(err, &te) {
				for _, msg := range te.Errors {
					if _, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
						msg = rest
					}
					errs = append(errs, fmt.Errorf("line %d: %s: %s", v.Line, full, msg))
				}
			} else {
				errs = append(errs, fmt.Errorf("line %d: %s: %w", v.Line, full, err))
			}
		}
	}
	return errs
}
