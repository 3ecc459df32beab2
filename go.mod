module github.com/sipvisor/sipvisor

go 1.26
