module github.com/oslo/oslo/bindings/go

go 1.19
