module github.com/eclipse-lmos/lmos-hub

go 1.26

require (
	github.com/VictoriaMetrics/metrics v1.40.2
	github.com/google/uuid v1.6.0
	github.com/theory/jsonpath v0.11.0
	go.etcd.io/bbolt v1.4.3
	go.yaml.in/yaml/v3 v3.0.4
)

require (
	github.com/kr/pretty v0.3.1 // indirect
	github.com/valyala/fastrand v1.1.0 // indirect
	github.com/valyala/histogram v1.2.0 // indirect
	golang.org/x/sys v0.29.0 // indirect
)
