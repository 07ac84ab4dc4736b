# mcp-bridge operator. `make test` and `make demo` are the two commands a
# newcomer needs; everything they use is built into bin/ on first run.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

IMG ?= ghcr.io/mcpbridge/operator:dev
BIN := $(CURDIR)/bin
ENVTEST_ASSETS := $(BIN)/k8s
KUBECTL := $(ENVTEST_ASSETS)/kubectl
CONTROLLER_GEN := $(BIN)/controller-gen
CONTROLLER_TOOLS_VERSION := v0.23.0
CHART := charts/mcp-bridge
GO_TEST_FLAGS ?= -race -count=1 -timeout 30m
# The chart tests run no concurrent code of ours; -race would only slow the
# build of the Helm SDK.
CHART_TEST_FLAGS ?= -count=1 -timeout 30m

.PHONY: all
all: build

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC manifests.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:maxDescLen=512 paths="./api/...;./cmd/...;./internal/controller/...;./internal/gateway/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	cp config/crd/bases/mcpbridge.dev_mcpservers.yaml config/crd/bases/mcpbridge.dev_mcptoolsets.yaml $(CHART)/files/crds/
	cp config/rbac/role.yaml $(CHART)/files/rbac/manager-role.yaml
	{ cat config/argocd/argocd-cm.header.yaml; sed 's/^./    &/' config/argocd/health.lua; } > config/argocd/argocd-cm.yaml
	mkdir -p $(CHART)/files/argocd
	cp config/argocd/health.lua config/argocd/argocd-cm.yaml $(CHART)/files/argocd/
	cp config/admission/*_policy.yaml $(CHART)/files/admission/

.PHONY: fmt
fmt: ## Run gofmt on the tree.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet (the operator, the chart tests' and the image builder's modules).
	go vet ./...
	cd test/chart && go vet ./...
	cd hack/image && go vet ./...

.PHONY: verify-generated
verify-generated: generate manifests ## Fail when generated files differ from what is committed.
	@if [ -d .git ] && [ -n "$$(git status --porcelain -- api config $(CHART)/files)" ]; then \
		echo "Generated files are stale; run 'make generate manifests' and commit:"; \
		git status --porcelain -- api config $(CHART)/files; git --no-pager diff --stat -- api config $(CHART)/files; exit 1; \
	fi

.PHONY: envtest
envtest: ## Build kube-apiserver, etcd and kubectl once per machine; bin/k8s links them (docs/development.md).
	hack/build-envtest.sh

.PHONY: fixtures
fixtures: ## Install third-party MCP servers for tests from test/node/package-lock.json.
	hack/install-fixtures.sh

# What make test needs first, at once: the control plane's build and npm
# wait on the network while the checks compile. The checks stay in order:
# vet must not read files that generate is rewriting.
.PHONY: test-prepare
test-prepare:
	$(MAKE) --no-print-directory -j3 envtest fixtures checks

.PHONY: checks
checks:
	$(MAKE) --no-print-directory verify-generated
	$(MAKE) --no-print-directory vet

.PHONY: test
test: test-prepare ## Run every test against a real control plane (no root needed).
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v -e /test/api$$ -e /test/e2e$$)
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) hack/test-api.sh $(GO_TEST_FLAGS)
	cd hack/image && go test -count=1 ./...
	$(MAKE) test-chart

.PHONY: test-chart
test-chart: envtest ## Test the Helm chart (lint, render, install on a real kube-apiserver); its own Go module.
	cd test/chart && KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test $(CHART_TEST_FLAGS) ./...

.PHONY: test-e2e
test-e2e: ## Run test/e2e on a real single-node cluster built from source (root, Linux; the first run builds the node, see README).
	hack/e2e.sh

##@ Build

.PHONY: build
build: ## Build the manager and the shim (static, as in the image).
	go build -o $(BIN)/manager ./cmd/manager
	CGO_ENABLED=0 go build -o $(BIN)/shim ./cmd/shim

.PHONY: run
run: ## Run the manager against the cluster in $KUBECONFIG (stdio servers as its children: every namespace may run Local; the gateway's CA Secret in namespace default).
	go run ./cmd/manager --local-stdio-namespaces='*' --manager-namespace=default $(RUN_ARGS)

.PHONY: demo
demo: ## Run the operator on a local control plane with sample servers (Ctrl-C stops it).
	hack/demo.sh

.PHONY: demo-down
demo-down: ## Stop a demo that was killed or runs elsewhere, and remove .demo/.
	hack/demo-down.sh

.PHONY: image
image: ## Build the image $(IMG) as an OCI tarball without Docker: bin/images/manager.tar.
	hack/image.sh manager $(IMG)

.PHONY: docker-build
docker-build: ## Build the image (needs a Docker engine; none runs on CI here).
	docker build -t $(IMG) .

##@ Deployment

.PHONY: install
install: envtest ## Install the CRDs into the cluster in $KUBECONFIG.
	$(KUBECTL) apply --server-side -f config/crd/bases

.PHONY: uninstall
uninstall: envtest ## Remove the CRDs from the cluster in $KUBECONFIG.
	$(KUBECTL) delete --ignore-not-found -f config/crd/bases

.PHONY: deploy
deploy: envtest ## Deploy the operator with image $(IMG) to the cluster in $KUBECONFIG (IMG is also the Pods' --shim-image).
	$(KUBECTL) kustomize config/default | sed -e 's|image: controller:latest|image: $(IMG)|' -e 's|--shim-image=controller:latest|--shim-image=$(IMG)|' \
		| $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: envtest ## Remove the operator from the cluster in $KUBECONFIG.
	$(KUBECTL) delete --ignore-not-found -k config/default

$(CONTROLLER_GEN):
	GOBIN=$(BIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
