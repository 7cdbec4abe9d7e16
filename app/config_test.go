package app

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// envMap is a getenv backed by a map.
func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeConfigFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lmos-hub.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigDefaults(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	if c.DataDir != "./lmos-data" || c.HTTP.Addr != ":8080" || c.MQTT.Addr != ":1883" ||
		!c.MDNS.Enabled || c.Join.Mode != "open" || c.Join.PendingTTL != Duration(24*time.Hour) || c.Access.Anonymous != "operate" || c.Log.Level != "info" || c.Log.Format != "text" ||
		c.HTTP.MaxBodyBytes != 262144 || c.HTTP.WriteRate != 200 || c.HTTP.WriteBurst != 400 ||
		!c.MQTT.Anonymous || c.MDNS.ForgetAfter != Duration(24*time.Hour) ||
		c.MQTT.MaxQueuedBytes != 1<<20 || c.MQTT.SlowClientTimeout != Duration(30*time.Second) || c.MQTT.ConnectTimeout != Duration(10*time.Second) ||
		c.Registry.EventLogSize != 1000 || c.Registry.MaxThings != 1024 || c.Registry.MaxDepth != 32 ||
		c.Search.MaxNodes != 10_000_000 || c.Search.MaxResultBytes != 16<<20 || c.Search.Timeout != Duration(5*time.Second) ||
		c.Search.MaxQueryBytes != 1024 || c.Search.MaxDescendants != 2 || c.Search.MaxConcurrentPerClient != 2 ||
		c.Search.MaxConcurrent != runtime.GOMAXPROCS(0) ||
		c.Registry.MaxTDBytes != 262144 || c.Registry.MaxBytes != 32<<20 || c.Registry.MaxThingsPerSource != 64 ||
		c.ShutdownTimeout != Duration(10*time.Second) || c.AdminToken != "" ||
		c.Security.RequireSigned || c.Security.VerifyRate != 50 || c.Security.VerifyBurst != 100 || c.Security.MaxClockSkew != Duration(5*time.Minute) ||
		c.TLS != (TLSConfig{HTTPSAddr: ":8443", MQTTSAddr: ":8883", ReloadInterval: Duration(10 * time.Second)}) ||
		c.HTTP.MaxStreamQueueBytes != 1<<20 ||
		c.Groups != (GroupsConfig{CredentialValidity: Duration(7 * 24 * time.Hour), StatusListValidity: Duration(10 * time.Minute),
			IssueRate: 128, IssueBurst: 1024, ActionOutputBytes: 32 << 20}) ||
		c.Federation != (FederationConfig{MaxPeers: 32}) {
		t.Errorf("unexpected defaults: %+v", c)
	}
	if host, err := os.Hostname(); err == nil && len(host) <= maxHubNameBytes && host != "" && c.Hub.Name != host {
		t.Errorf("Hub.Name = %q, want the host name %q", c.Hub.Name, host)
	}

	// With no file, no environment and no flags LoadConfig gives the defaults.
	got, err := LoadConfig(nil, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("LoadConfig(nil) = %+v, want %+v", got, c)
	}
}

func TestConfigPrecedence(t *testing.T) {
	path := writeConfigFile(t, `
dataDir: /from/file
hub:
  name: file-hub
http:
  addr: "127.0.0.1:9001"
  private: true
  allowedOrigins: ["https://example.com"]
  allowedHosts: ["hub.example.com", "*.lan"]
mqtt:
  addr: "127.0.0.1:9002"
  maxQueuedBytes: 65536
  slowClientTimeout: 5s
  connectTimeout: 3s
mdns:
  enabled: false
  forgetAfter: 1h
join:
  mode: approve
tls:
  enabled: false
  httpsAddr: "127.0.0.1:9443"
  cert: /etc/hub.crt
  key: /etc/hub.key
  reloadInterval: 1m
log:
  format: json
  level: debug
registry:
  maxThings: 50
  maxTDBytes: 65536
  maxBytes: 1000000
  maxThingsPerSource: 0
  maxDepth: 20
search:
  maxNodes: 5000
  timeout: 2s
  maxConcurrentPerClient: 1
security:
  requireSigned: true
  verifyRate: 5
  maxClockSkew: 30s
shutdownTimeout: 3s
`)
	env := map[string]string{
		"LMOS_HUB_CONFIG":     path,
		"LMOS_HUB_MQTT_ADDR":  "127.0.0.1:9102", // env over file
		"LMOS_HUB_JOIN_MODE":  "closed",         // env over file, then flag over env
		"LMOS_HUB_LOG_LEVEL":  "warn",           // env over file
		"LMOS_HUB_MDNS":       "true",           // env over file
		"LMOS_HUB_TLS":        "true",           // env over file
		"LMOS_HUB_MQTTS_ADDR": "127.0.0.1:9883", // env over the default
	}
	args := []string{"--join-mode", "open", "--log-format=text", "--http-addr", ":0", "--hub-name", "flag-hub", "--tls-only", "--tls-key", "/flag.key"}
	c, err := LoadConfig(args, envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"dataDir (file)", c.DataDir, "/from/file"},
		{"http.private (file)", c.HTTP.Private, true},
		{"http.allowedOrigins (file)", c.HTTP.AllowedOrigins, []string{"https://example.com"}},
		{"http.allowedHosts (file)", c.HTTP.AllowedHosts, []string{"hub.example.com", "*.lan"}},
		{"mdns.forgetAfter (file)", c.MDNS.ForgetAfter, Duration(time.Hour)},
		{"registry.maxThings (file)", c.Registry.MaxThings, 50},
		{"registry.maxDepth (file)", c.Registry.MaxDepth, 20},
		{"search.maxNodes (file)", c.Search.MaxNodes, int64(5000)},
		{"search.timeout (file)", c.Search.Timeout, Duration(2 * time.Second)},
		{"search.maxConcurrentPerClient (file)", c.Search.MaxConcurrentPerClient, 1},
		{"search.maxResultBytes (default kept)", c.Search.MaxResultBytes, int64(16 << 20)},
		{"security.requireSigned (file)", c.Security.RequireSigned, true},
		{"security.verifyRate (file)", c.Security.VerifyRate, 5.0},
		{"security.maxClockSkew (file)", c.Security.MaxClockSkew, Duration(30 * time.Second)},
		{"security.verifyBurst (default kept)", c.Security.VerifyBurst, 100},
		{"registry.maxTDBytes (file)", c.Registry.MaxTDBytes, 65536},
		{"registry.maxBytes (file)", c.Registry.MaxBytes, int64(1000000)},
		{"registry.maxThingsPerSource (file)", c.Registry.MaxThingsPerSource, 0},
		{"mqtt.maxQueuedBytes (file)", c.MQTT.MaxQueuedBytes, 65536},
		{"mqtt.slowClientTimeout (file)", c.MQTT.SlowClientTimeout, Duration(5 * time.Second)},
		{"mqtt.connectTimeout (file)", c.MQTT.ConnectTimeout, Duration(3 * time.Second)},
		{"shutdownTimeout (file)", c.ShutdownTimeout, Duration(3 * time.Second)},
		{"http.maxBodyBytes (default kept)", c.HTTP.MaxBodyBytes, int64(262144)},
		{"mqtt.anonymous (default kept)", c.MQTT.Anonymous, true},
		{"registry.eventLogSize (default kept)", c.Registry.EventLogSize, 1000},
		{"mqtt.addr (env over file)", c.MQTT.Addr, "127.0.0.1:9102"},
		{"log.level (env over file)", c.Log.Level, "warn"},
		{"mdns.enabled (env over file)", c.MDNS.Enabled, true},
		{"join.mode (flag over env)", c.Join.Mode, "open"},
		{"log.format (flag over file)", c.Log.Format, "text"},
		{"http.addr (flag over file)", c.HTTP.Addr, ":0"},
		{"hub.name (flag over file)", c.Hub.Name, "flag-hub"},
		{"tls.enabled (env over file)", c.TLS.Enabled, true},
		{"tls.only (flag)", c.TLS.Only, true},
		{"tls.httpsAddr (file)", c.TLS.HTTPSAddr, "127.0.0.1:9443"},
		{"tls.mqttsAddr (env)", c.TLS.MQTTSAddr, "127.0.0.1:9883"},
		{"tls.cert (file)", c.TLS.Cert, "/etc/hub.crt"},
		{"tls.key (flag over file)", c.TLS.Key, "/flag.key"},
		{"tls.reloadInterval (file)", c.TLS.ReloadInterval, Duration(time.Minute)},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.name, ch.got, ch.want)
		}
	}

	// --config wins over LMOS_HUB_CONFIG.
	other := writeConfigFile(t, "dataDir: /other\n")
	c, err = LoadConfig([]string{"--config", other}, envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/other" || c.Hub.Name == "file-hub" {
		t.Errorf("--config did not replace LMOS_HUB_CONFIG: dataDir=%q hub.name=%q", c.DataDir, c.Hub.Name)
	}
}

func TestConfigFlagOverridesOnlyWhenSet(t *testing.T) {
	env := map[string]string{"LMOS_HUB_MDNS": "false", "LMOS_HUB_DATA_DIR": "/env", "LMOS_HUB_NAME": "env-hub",
		"LMOS_HUB_ADMIN_TOKEN": "env-token-0123456789", "LMOS_HUB_HTTP_ADDR": ":7000"}
	c, err := LoadConfig([]string{"--log-level", "error"}, envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.MDNS.Enabled || c.DataDir != "/env" || c.Hub.Name != "env-hub" || c.AdminToken != "env-token-0123456789" || c.HTTP.Addr != ":7000" {
		t.Errorf("unset flags overrode the environment: %+v", c)
	}
	// A flag set to the default value still overrides.
	c, err = LoadConfig([]string{"--mdns", "--data-dir=./lmos-data", "--admin-token", "flag-token-0123456789"}, envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	if !c.MDNS.Enabled || c.DataDir != "./lmos-data" || c.AdminToken != "flag-token-0123456789" {
		t.Errorf("set flags did not override: %+v", c)
	}
}

func TestConfigYAMLUnknownKey(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"http:\n  adr: \":8080\"\n", `"http.adr"`},
		{"datadir: /x\n", `"datadir"`},
		{"hub:\n  name: x\n  nmae: y\n", `"hub.nmae"`},
		// Settings issue 25 removed with the hub's own MQTT loop.
		{"mqtt:\n  connLoop: hub\n", `"mqtt.connLoop"`},
		{"mqtt:\n  deliveryPath: mochi\n", `"mqtt.deliveryPath"`},
		{"mqtt:\n  idlePark: 1s\n", `"mqtt.idlePark"`},
	} {
		path := writeConfigFile(t, tc.text)
		_, err := LoadConfig([]string{"--config", path}, envMap(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("YAML %q: error %v, want one naming %s and the file", tc.text, err, tc.want)
		}
	}
}

func TestConfigYAMLBadValues(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"shutdownTimeout: 10 sec\n", "shutdownTimeout"},
		{"mdns:\n  forgetAfter: [1]\n", "mdns.forgetAfter"},
		{"http:\n  maxBodyBytes: lots\n", "http.maxBodyBytes"},
		{"http: 8080\n", "http"},
		{"- a\n- b\n", "mapping"},
	} {
		path := writeConfigFile(t, tc.text)
		_, err := LoadConfig([]string{"--config", path}, envMap(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("YAML %q: error %v, want one naming %s", tc.text, err, tc.want)
		}
	}
	// Values that decode but are invalid are reported by Validate.
	path := writeConfigFile(t, "join:\n  mode: maybe\n")
	_, err := LoadConfig([]string{"--config", path}, envMap(nil))
	if err == nil || !strings.Contains(err.Error(), `join.mode: "maybe" is not one of open, approve, closed`) {
		t.Errorf("join.mode maybe: error %v", err)
	}
	// An empty file configures nothing.
	path = writeConfigFile(t, "# nothing here\n")
	if _, err := LoadConfig([]string{"--config", path}, envMap(nil)); err != nil {
		t.Errorf("empty file: %v", err)
	}
	// A missing file is an error.
	_, err = LoadConfig([]string{"--config", filepath.Join(t.TempDir(), "absent.yaml")}, envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("missing file: error %v", err)
	}
}

func TestConfigBadEnv(t *testing.T) {
	for _, tc := range []struct{ env, value, want string }{
		{"LMOS_HUB_MDNS", "maybe", `"maybe" is not a boolean`},
		{"LMOS_HUB_JOIN_MODE", "maybe", `"maybe" is not one of open, approve, closed`},
		{"LMOS_HUB_ACCESS_ANONYMOUS", "everyone", `"everyone" is not one of none, read, operate`},
		{"LMOS_HUB_HTTP_ADDR", "localhost", `missing port in address "localhost"`},
		{"LMOS_HUB_MQTT_ADDR", ":70000", "not a number from 0 to 65535"},
		{"LMOS_HUB_LOG_FORMAT", "xml", `"xml" is not one of text, json`},
		{"LMOS_HUB_LOG_LEVEL", "loud", `"loud" is not one of debug, info, warn, error`},
		{"LMOS_HUB_NAME", strings.Repeat("n", 64), "limit is 63"},
		{"LMOS_HUB_ADMIN_TOKEN", "has space", "without spaces"},
	} {
		_, err := LoadConfig(nil, envMap(map[string]string{tc.env: tc.value}))
		if err == nil || !strings.Contains(err.Error(), tc.env) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: error %v, want one naming the variable and %q", tc.env, tc.value, err, tc.want)
		}
	}
}

func TestConfigBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mdns=maybe"}, "-mdns"},
		{[]string{"--join-mode", "maybe"}, `"maybe" is not one of open, approve, closed`},
		{[]string{"--http-addr", "localhost"}, `missing port in address "localhost"`},
		{[]string{"--nope"}, "flag provided but not defined: -nope"},
		{[]string{"--data-dir"}, "flag needs an argument"},
		{[]string{"--mdns", "false"}, `unexpected argument "false"`},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, err := LoadConfig(tc.args, envMap(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadConfig(%q): error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	if _, err := LoadConfig([]string{"-h"}, envMap(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("LoadConfig(-h) = %v, want flag.ErrHelp", err)
	}
}

func TestConfigValidateNamesSetting(t *testing.T) {
	for _, tc := range []struct {
		setting string
		mutate  func(*Config)
		want    string
	}{
		{"dataDir", func(c *Config) { c.DataDir = "" }, "dataDir: must not be empty"},
		{"hub.name", func(c *Config) { c.Hub.Name = "" }, "hub.name: must not be empty"},
		{"hub.name", func(c *Config) { c.Hub.Name = strings.Repeat("x", 64) }, "hub.name: "},
		{"hub.name", func(c *Config) { c.Hub.Name = "a\nb" }, "hub.name: "},
		{"http.addr", func(c *Config) { c.HTTP.Addr = "localhost" }, `http.addr: missing port in address "localhost"`},
		{"http.addr", func(c *Config) { c.HTTP.Addr = ":65536" }, "http.addr: "},
		{"http.addr", func(c *Config) { c.HTTP.Addr = ":-1" }, "http.addr: "},
		{"http.addr", func(c *Config) { c.HTTP.Addr = ":http" }, "http.addr: "},
		{"http.addr", func(c *Config) { c.HTTP.Addr = "" }, "http.addr: "},
		{"http.maxBodyBytes", func(c *Config) { c.HTTP.MaxBodyBytes = 0 }, "http.maxBodyBytes: "},
		{"http.writeRate", func(c *Config) { c.HTTP.WriteRate = -1 }, "http.writeRate: "},
		{"http.writeBurst", func(c *Config) { c.HTTP.WriteBurst = 0 }, "http.writeBurst: "},
		{"http.proxyTimeout", func(c *Config) { c.HTTP.ProxyTimeout = 0 }, "http.proxyTimeout: "},
		{"http.maxStreamsPerClient", func(c *Config) { c.HTTP.MaxStreamsPerClient = 0 }, "http.maxStreamsPerClient: must be at least 1"},
		{"http.maxStreamQueueBytes", func(c *Config) { c.HTTP.MaxStreamQueueBytes = 1000 }, "http.maxStreamQueueBytes: must be at least 65536"},
		{"http.allowedOrigins", func(c *Config) { c.HTTP.AllowedOrigins = []string{"*", "example.com"} }, "http.allowedOrigins[1]: "},
		{"http.allowedHosts", func(c *Config) { c.HTTP.AllowedHosts = []string{"ok.example", "hub.example:8080"} }, "http.allowedHosts[1]: "},
		{"http.allowedHosts", func(c *Config) { c.HTTP.AllowedHosts = []string{"http://hub.example"} }, "http.allowedHosts[0]: "},
		{"http.allowedHosts", func(c *Config) { c.HTTP.AllowedHosts = []string{"a..b"} }, "http.allowedHosts[0]: "},
		{"http.allowedHosts", func(c *Config) { c.HTTP.AllowedHosts = []string{"*.*.b"} }, "http.allowedHosts[0]: "},
		{"http.allowedHosts", func(c *Config) { c.HTTP.AllowedHosts = []string{""} }, "http.allowedHosts[0]: "},
		{"mqtt.addr", func(c *Config) { c.MQTT.Addr = "1883" }, `mqtt.addr: missing port in address "1883"`},
		{"mqtt.maxQueuedBytes", func(c *Config) { c.MQTT.MaxQueuedBytes = 1000 }, "mqtt.maxQueuedBytes: must be at least 4096 bytes"},
		{"mqtt.slowClientTimeout", func(c *Config) { c.MQTT.SlowClientTimeout = 0 }, "mqtt.slowClientTimeout: "},
		{"mqtt.connectTimeout", func(c *Config) { c.MQTT.ConnectTimeout = 0 }, "mqtt.connectTimeout: "},
		{"tls.httpsAddr", func(c *Config) { c.TLS.HTTPSAddr = "8443" }, "tls.httpsAddr: "},
		{"tls.mqttsAddr", func(c *Config) { c.TLS.MQTTSAddr = ":99999" }, "tls.mqttsAddr: "},
		{"tls.only", func(c *Config) { c.TLS.Only = true }, "tls.only: needs tls.enabled: true"},
		{"tls.cert", func(c *Config) { c.TLS.Cert = "hub.crt" }, "tls.cert: tls.cert and tls.key go together"},
		{"tls.cert (key alone)", func(c *Config) { c.TLS.Key = "hub.key" }, "tls.cert: tls.cert and tls.key go together"},
		{"tls.reloadInterval", func(c *Config) { c.TLS.ReloadInterval = 0 }, "tls.reloadInterval: "},
		{"mdns.interfaces", func(c *Config) { c.MDNS.Interfaces = []string{""} }, "mdns.interfaces[0]: "},
		{"mdns.forgetAfter", func(c *Config) { c.MDNS.ForgetAfter = 0 }, "mdns.forgetAfter: "},
		{"groups.credentialValidity", func(c *Config) { c.Groups.CredentialValidity = Duration(time.Minute) }, "groups.credentialValidity: must be a duration from 1h"},
		{"groups.statusListValidity", func(c *Config) { c.Groups.StatusListValidity = Duration(48 * time.Hour) }, "groups.statusListValidity: must be a duration from 1m to 24h"},
		{"groups.issueRate", func(c *Config) { c.Groups.IssueRate = -1 }, "groups.issueRate: must be a number of credentials per hour"},
		{"groups.issueBurst", func(c *Config) { c.Groups.IssueBurst = 0 }, "groups.issueBurst: must be from 1"},
		{"groups.actionOutputBytes", func(c *Config) { c.Groups.ActionOutputBytes = 0 }, "groups.actionOutputBytes: must be at least 1 byte"},
		{"federation.maxPeers", func(c *Config) { c.Federation.MaxPeers = 0 }, "federation.maxPeers: must be from 1 to 1024"},
		{"federation.maxPeers", func(c *Config) { c.Federation.MaxPeers = 1025 }, "federation.maxPeers: must be from 1 to 1024"},
		{"groups.statusListURL", func(c *Config) { c.Groups.StatusListURL = "/credentials/status" }, "groups.statusListURL: must be an absolute"},
		{"groups.statusListURL", func(c *Config) { c.Groups.StatusListURL = "ftp://hub/x" }, "groups.statusListURL: must be an absolute"},
		{"join.mode", func(c *Config) { c.Join.Mode = "maybe" }, `join.mode: "maybe" is not one of open, approve, closed`},
		{"join.pendingTTL", func(c *Config) { c.Join.PendingTTL = 0 }, "join.pendingTTL: must be a duration from 1m to 365d"},
		{"join.pendingTTL (short)", func(c *Config) { c.Join.PendingTTL = Duration(59 * time.Second) }, "join.pendingTTL: "},
		{"join.pendingTTL (long)", func(c *Config) { c.Join.PendingTTL = Duration(366 * 24 * time.Hour) }, "join.pendingTTL: "},
		{"security.verifyRate", func(c *Config) { c.Security.VerifyRate = 0 }, "security.verifyRate: must be greater than 0"},
		{"security.verifyBurst", func(c *Config) { c.Security.VerifyBurst = 0 }, "security.verifyBurst: must be at least 1"},
		{"security.maxClockSkew", func(c *Config) { c.Security.MaxClockSkew = 0 }, "security.maxClockSkew: "},
		{"access.anonymous", func(c *Config) { c.Access.Anonymous = "all" }, `access.anonymous: "all" is not one of none, read, operate`},
		{"adminToken", func(c *Config) { c.AdminToken = "a b" }, "adminToken: "},
		{"adminToken", func(c *Config) { c.AdminToken = "short" }, "adminToken: must be at least 16"},
		{"log.format", func(c *Config) { c.Log.Format = "xml" }, `log.format: "xml" is not one of text, json`},
		{"log.level", func(c *Config) { c.Log.Level = "" }, `log.level: "" is not one of debug, info, warn, error`},
		{"registry.eventLogSize", func(c *Config) { c.Registry.EventLogSize = 0 }, "registry.eventLogSize: "},
		{"registry.maxThings", func(c *Config) { c.Registry.MaxThings = -1 }, "registry.maxThings: "},
		{"registry.maxDepth", func(c *Config) { c.Registry.MaxDepth = 1 }, "registry.maxDepth: must be at least 2"},
		{"search.maxNodes", func(c *Config) { c.Search.MaxNodes = 0 }, "search.maxNodes: must be at least 1"},
		{"search.maxResultBytes", func(c *Config) { c.Search.MaxResultBytes = 0 }, "search.maxResultBytes: "},
		{"search.timeout", func(c *Config) { c.Search.Timeout = 0 }, "search.timeout: "},
		{"search.maxQueryBytes", func(c *Config) { c.Search.MaxQueryBytes = 0 }, "search.maxQueryBytes: "},
		{"search.maxDescendants", func(c *Config) { c.Search.MaxDescendants = 0 }, "search.maxDescendants: "},
		{"search.maxConcurrentPerClient", func(c *Config) { c.Search.MaxConcurrentPerClient = 0 }, "search.maxConcurrentPerClient: "},
		{"search.maxConcurrent", func(c *Config) { c.Search.MaxConcurrent = 0 }, "search.maxConcurrent: "},
		{"registry.maxTDBytes", func(c *Config) { c.Registry.MaxTDBytes = 0 }, "registry.maxTDBytes: "},
		{"registry.maxTDBytes (over a packet)", func(c *Config) { c.Registry.MaxTDBytes = 2 << 20 }, "registry.maxTDBytes: "},
		{"registry.maxBytes", func(c *Config) { c.Registry.MaxBytes = -1 }, "registry.maxBytes: "},
		{"registry.maxThingsPerSource", func(c *Config) { c.Registry.MaxThingsPerSource = -1 }, "registry.maxThingsPerSource: "},
		{"shutdownTimeout", func(c *Config) { c.ShutdownTimeout = 0 }, "shutdownTimeout: "},
	} {
		c := DefaultConfig()
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error starting %q", tc.setting, err, tc.want)
		}
	}

	// Valid edge values.
	c := DefaultConfig()
	c.HTTP.Addr, c.MQTT.Addr = ":0", "[::1]:65535"
	c.HTTP.WriteRate, c.HTTP.WriteBurst = 0, 0 // limit disabled: burst unused
	c.Hub.Name = strings.Repeat("é", 31)       // 62 bytes
	c.HTTP.AllowedOrigins = []string{"*", "https://example.com:8443", "http://hub.local"}
	c.HTTP.AllowedHosts = []string{"*", "hub.example.com.", "*.lan", "My-Hub", "pi_1"}
	if err := c.Validate(); err != nil {
		t.Errorf("valid edge values: %v", err)
	}

	// All problems are reported together.
	c = DefaultConfig()
	c.DataDir, c.Join.Mode, c.HTTP.Addr = "", "maybe", "x"
	err := c.Validate()
	for _, want := range []string{"dataDir", "join.mode", "http.addr"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("joined error %v does not name %s", err, want)
		}
	}
	if n := len(strings.Split(err.Error(), "\n")); n != 3 {
		t.Errorf("joined error has %d lines, want 3: %v", n, err)
	}
}

func TestConfigRedacted(t *testing.T) {
	c := DefaultConfig()
	if r := c.Redacted(); r.AdminToken != "" {
		t.Errorf("Redacted() of no token = %q, want empty", r.AdminToken)
	}
	c.AdminToken = "s3cret"
	c.HTTP.AllowedOrigins = []string{"https://a.example"}
	c.HTTP.AllowedHosts = []string{"a.example"}
	r := c.Redacted()
	if r.AdminToken != "<redacted>" {
		t.Errorf("Redacted().AdminToken = %q", r.AdminToken)
	}
	if c.AdminToken != "s3cret" {
		t.Error("Redacted changed the original")
	}
	r.HTTP.AllowedOrigins[0] = "changed"
	r.HTTP.AllowedHosts[0] = "changed"
	if c.HTTP.AllowedOrigins[0] != "https://a.example" || c.HTTP.AllowedHosts[0] != "a.example" {
		t.Error("Redacted shares slices with the original")
	}
}

func TestConfigDurationYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	if err := yaml.Unmarshal([]byte("d: 1h30m\n"), &v); err != nil || v.D != Duration(90*time.Minute) {
		t.Fatalf("unmarshal: %v %v", v.D, err)
	}
	out, err := yaml.Marshal(v)
	if err != nil || string(out) != "d: 1h30m0s\n" {
		t.Errorf("marshal = %q %v", out, err)
	}
	// Whole days, for groups.credentialValidity.
	if err := yaml.Unmarshal([]byte("d: 365d\n"), &v); err != nil || v.D != Duration(365*24*time.Hour) {
		t.Errorf("365d: %v %v", v.D, err)
	}
	if err := yaml.Unmarshal([]byte("d: 1.5d\n"), &v); err == nil {
		t.Error("1.5d was read")
	}
	if err := yaml.Unmarshal([]byte("d: soon\n"), &v); err == nil || !strings.Contains(err.Error(), `invalid duration "soon"`) {
		t.Errorf("bad duration: %v", err)
	}
}

// access.anonymous comes from the file, the environment or the flag, and
// the deprecated http.private: true means none.
func TestAccessAnonymousSetting(t *testing.T) {
	path := writeConfigFile(t, "access:\n  anonymous: read\n")
	c, err := LoadConfig([]string{"--config", path}, nil)
	if err != nil || c.Access.Anonymous != "read" || c.AnonymousAccess() != "read" {
		t.Fatalf("file: %q %v", c.Access.Anonymous, err)
	}
	c, err = LoadConfig([]string{"--config", path}, func(k string) string {
		return map[string]string{"LMOS_HUB_ACCESS_ANONYMOUS": "none"}[k]
	})
	if err != nil || c.AnonymousAccess() != "none" {
		t.Fatalf("env: %q %v", c.Access.Anonymous, err)
	}
	c, err = LoadConfig([]string{"--access-anonymous", "operate"}, nil)
	if err != nil || c.AnonymousAccess() != "operate" {
		t.Fatalf("flag: %q %v", c.Access.Anonymous, err)
	}
	c.HTTP.Private = true
	if c.AnonymousAccess() != "none" {
		t.Fatalf("http.private: true gives %q, want none", c.AnonymousAccess())
	}
}

// join.pendingTTL comes from the file, the environment or the flag, in
// that precedence, and is checked wherever it comes from.
func TestJoinPendingTTLSetting(t *testing.T) {
	path := writeConfigFile(t, "join:\n  mode: approve\n  pendingTTL: 2h\n")
	c, err := LoadConfig([]string{"--config", path}, nil)
	if err != nil || c.Join.PendingTTL != Duration(2*time.Hour) {
		t.Fatalf("file: %s %v", c.Join.PendingTTL, err)
	}
	env := envMap(map[string]string{"LMOS_HUB_JOIN_PENDING_TTL": "7d"})
	c, err = LoadConfig([]string{"--config", path}, env)
	if err != nil || c.Join.PendingTTL != Duration(7*24*time.Hour) {
		t.Fatalf("env: %s %v", c.Join.PendingTTL, err)
	}
	c, err = LoadConfig([]string{"--config", path, "--join-pending-ttl", "90m"}, env)
	if err != nil || c.Join.PendingTTL != Duration(90*time.Minute) {
		t.Fatalf("flag: %s %v", c.Join.PendingTTL, err)
	}
	for _, bad := range []struct {
		args []string
		env  map[string]string
		file string
	}{
		{args: []string{"--join-pending-ttl", "30s"}},
		{args: []string{"--join-pending-ttl", "soon"}},
		{env: map[string]string{"LMOS_HUB_JOIN_PENDING_TTL": "400d"}},
		{file: "join:\n  pendingTTL: 0s\n"},
	} {
		args := bad.args
		if bad.file != "" {
			args = append(args, "--config", writeConfigFile(t, bad.file))
		}
		if _, err := LoadConfig(args, envMap(bad.env)); err == nil || !strings.Contains(err.Error(), "pending-ttl") && !strings.Contains(err.Error(), "PENDING_TTL") && !strings.Contains(err.Error(), "join.pendingTTL") {
			t.Errorf("%+v: %v, want an error naming the setting", bad, err)
		}
	}
}
