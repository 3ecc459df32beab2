module github.com/sipvisor/sipvisor

go 1.26.0

require (
	github.com/oklog/run v1.2.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
