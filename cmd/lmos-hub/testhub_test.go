package main

import (
	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// The hub under test is app's Main run by test/kit/hubtest, as
// main runs it (hubtest.Start); these names keep the package's tests short.
type (
	Config   = app.Config
	Main     = app.Main
	Duration = app.Duration
)

// testToken is the admin token test hubs are provisioned with.
const testToken = hubtest.Token
