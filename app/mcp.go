package app

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/eclipse-lmos/lmos-hub/mcpdoor"
)

// MCPConfig configures the MCP door, /mcp (PROTOCOL §11).
type MCPConfig struct {
	// Enabled serves /mcp; default true.
	Enabled bool `yaml:"enabled"`
	// MaxTools is how many Thing and group tools tools/list shows at most;
	// with more (after the client's access and filter), it shows only
	// find_tools and call_tool. Default 38: with those two, 40, what the
	// most frugal client sends its model.
	MaxTools int `yaml:"maxTools"`
	// MaxCalls bounds the tool calls running at once; default 32.
	MaxCalls int `yaml:"maxCalls"`
	// MaxListeners bounds the open notification streams; default 64.
	MaxListeners int `yaml:"maxListeners"`
	// MaxSessions bounds the sessions of clients of revisions before
	// 2026-07-28; default 256. SessionTimeout closes a session that sent no
	// request for that long (an open notification stream does not count:
	// the SDK counts requests); default 1h. Its client must start a new one.
	MaxSessions    int      `yaml:"maxSessions"`
	SessionTimeout Duration `yaml:"sessionTimeout"`
}

func defaultMCPConfig() MCPConfig {
	return MCPConfig{Enabled: true, MaxTools: mcpdoor.DefaultMaxListed, MaxCalls: mcpdoor.DefaultMaxCalls,
		MaxListeners: mcpdoor.DefaultMaxListeners, MaxSessions: mcpdoor.DefaultMaxSessions,
		SessionTimeout: Duration(mcpdoor.DefaultSessionTimeout)}
}

func (c Config) validateMCP(bad func(string, error)) {
	for _, v := range []struct {
		name string
		n    int
	}{{"mcp.maxTools", c.MCP.MaxTools}, {"mcp.maxCalls", c.MCP.MaxCalls}, {"mcp.maxListeners", c.MCP.MaxListeners}, {"mcp.maxSessions", c.MCP.MaxSessions}} {
		if v.n < 1 {
			bad(v.name, fmt.Errorf("must be at least 1 (got %d)", v.n))
		}
	}
	if c.MCP.SessionTimeout <= 0 {
		bad("mcp.sessionTimeout", fmt.Errorf("must be a duration greater than 0 such as \"1h\" (got %s)", c.MCP.SessionTimeout))
	}
}

// openMCP builds the MCP door and keeps its tools in step with the
// directory; openWeb mounts it.
func (m *Main) openMCP(context.Context) error {
	cfg := m.Config
	if !cfg.MCP.Enabled {
		return nil
	}
	door := mcpdoor.New(mcpdoor.Config{
		Registry: m.Registry, Router: m.Router, Access: m.Access, GroupActions: m.GroupActions,
		MaxListed: cfg.MCP.MaxTools, MaxCalls: cfg.MCP.MaxCalls, MaxListeners: cfg.MCP.MaxListeners,
		MaxSessions: cfg.MCP.MaxSessions, SessionTimeout: time.Duration(cfg.MCP.SessionTimeout),
		CallTimeout: time.Duration(cfg.HTTP.ProxyTimeout), MaxBodyBytes: cfg.HTTP.MaxBodyBytes,
		Version: m.Version, Logger: m.Logger.With("component", "mcp"),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := door.Run(ctx); err != nil {
			m.Logger.Error("mcp door stopped", "err", err)
		}
	}()
	m.MCP = door
	m.onClose("mcp", func(context.Context) error {
		cancel()
		<-done
		return nil
	})
	return nil
}

// mcpHandler is the door for web (nil: none; a nil *Door in an interface
// would not be).
func (m *Main) mcpHandler() http.Handler {
	if m.MCP == nil {
		return nil
	}
	return m.MCP
}
