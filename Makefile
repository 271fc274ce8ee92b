# Paddock — `make demo` and `make test` work on a fresh Debian 12 machine as
# root: each installs what is missing (scripts/setup.sh), starts dockerd,
# builds the images that are absent, and is fast the second time.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := bin
GOFLAGS_STATIC := CGO_ENABLED=0
TEST_TIMEOUT ?= 20m
# The owners of the Paddock containers on the engine before the suite (scripts/leftovers.sh).
LEFTOVERS := $(BIN)/leftovers.before
.DEFAULT_GOAL := help

.PHONY: help setup build images images-all test test-short demo bench lint up down clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: ## Install missing Debian packages (docker.io, redis-server, …) and start dockerd
	@scripts/setup.sh

build: ## Build the static bin/paddock and bin/paddock-init
	@mkdir -p $(BIN)
	$(GOFLAGS_STATIC) $(GO) build -trimpath -o $(BIN)/paddock ./cmd/paddock
	$(GOFLAGS_STATIC) $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/paddock-init ./cmd/paddock-init

images: setup ## Build the sandbox images that are absent (paddock/test, paddock/sandbox)
	@scripts/build-images.sh test sandbox

images-all: setup build ## Also build the paddock binary's own image
	@scripts/build-images.sh test sandbox paddock

# The Go suite, then the compose fleet's own test (test-compose: the
# images it needs are built by images-deploy, so a fresh clone runs it too),
# then the fleet harness's short version (namespace hosts, faults in flight),
# then the leftovers check. TestCompose runs once, in its full form, after
# the suite: the suite skips it by name (-skip), not by a silent t.Skip.
test: setup images lint inspector ## Lint, run the whole suite, the compose fleet test and the short fleet harness on real Docker, Redis and NATS, check it left no container
	@scripts/leftovers.sh snapshot $(LEFTOVERS)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -skip '^TestCompose$$' ./...
	@$(MAKE) --no-print-directory test-compose
	@$(MAKE) --no-print-directory test-fleet-short
	@scripts/leftovers.sh check $(LEFTOVERS)

test-short: setup images inspector ## The suite without the slowest chaos and fault tests
	$(GO) test -race -count=1 -short -timeout $(TEST_TIMEOUT) ./...

demo: setup images build ## Start the stack, run a real batch of jobs, print the results
	@scripts/demo.sh

bench: setup images build ## Compare Paddock side by side with the naive alternatives
	@scripts/bench.sh

.PHONY: inspector bench-agent ui-test test-fleet test-fleet-short

# The multi-host harness (internal/fleettest, docs/reliability.md "Fleet
# harness"): hosts are network namespaces pdk-<run>-* on a bridge; a crashed
# run's leftovers are removed by the next. Writes bench/out/fleet.json.
FLEET_TIMEOUT ?= 120m
test-fleet: setup images ## Fleet of namespace hosts (3 NATS, Redis + 3 Sentinels, 2 schedulers, 3 workers), 5,000 jobs, every fault (PADDOCK_FLEET_JOBS=N; >20 min)
	PADDOCK_FLEET=full $(GO) test -count=1 -v -run 'TestFleet$$' -timeout $(FLEET_TIMEOUT) ./internal/fleettest/

test-fleet-short: setup images ## The fleet harness's short version: 300 jobs, 4 faults (~4-5 min), bench/out/fleet-short.json
	PADDOCK_FLEET=short $(GO) test -count=1 -v -run 'TestFleet$$' -timeout 15m ./internal/fleettest/

# The MCP Inspector CLI pinned in gateway/testdata/inspector (package-lock.json),
# which cli/inspector_test.go runs; npm ci only when node_modules is
# missing or older than the lockfile. Debian's npm only when no npm is on PATH
# (NodeSource's nodejs bundles its own and conflicts with Debian's package).
INSPECTOR_DIR := gateway/testdata/inspector
inspector: setup ## Install the pinned MCP Inspector CLI (npm ci) when missing or older than its lockfile
	@command -v npm >/dev/null || { echo "installing Debian's npm …"; \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm >/dev/null; }
	@if [ ! -d $(INSPECTOR_DIR)/node_modules ] || [ $(INSPECTOR_DIR)/node_modules -ot $(INSPECTOR_DIR)/package-lock.json ]; then \
	  npm ci --prefix $(INSPECTOR_DIR) --no-audit --no-fund && touch $(INSPECTOR_DIR)/node_modules; fi

ui-test: setup ## The dashboard's browser test alone (headless chromium), screenshots in bench/out/ui/
	@scripts/build-images.sh test
	PADDOCK_UI_SHOTS=bench/out/ui $(GO) test ./cli -run TestDashboardInBrowser -count=1 -v -timeout $(TEST_TIMEOUT)
	@ls bench/out/ui/*.png

bench-agent: setup images ## Agent token economy: the bash tool's capped answers against tools that return everything
	PADDOCK_BENCH_AGENT=1 $(GO) test ./gateway -run TestAgentBench -count=1 -v -timeout $(TEST_TIMEOUT)
	@cat bench/out/agent.md

lint: ## gofmt, go vet, staticcheck (pinned in go.mod as a tool), go mod tidy -diff, no function over 80 lines
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run 'go mod tidy'"; $(GO) mod tidy -diff; exit 1; }
	$(GO) run ./internal/funclen -max 80 .

up: setup images build ## Run the all-in-one stack in the foreground (Ctrl-C stops)
	$(BIN)/paddock up

down: ## Remove every Paddock container left on this host
	@ids=$$(docker ps -aq --filter label=io.paddock.managed=1); \
	  if [ -n "$$ids" ]; then docker rm -f $$ids >/dev/null && echo "removed $$(echo $$ids | wc -w) containers"; else echo "no Paddock containers"; fi

clean: ## Remove build outputs
	rm -rf $(BIN) bench/out

# ---- Deploy: Docker Compose fleet (docker-compose.yml, deploy/, docs/operations.md)
COMPOSE ?= docker-compose
COMPOSE_PROJECT ?= paddock
WORKERS ?= 3
# Where `make compose-up` / `make compose-creds` put the dev tenant's credentials
# and its bearer token for the gateway.
COMPOSE_CREDS ?= compose-dev.creds
COMPOSE_TOKEN ?= compose-dev.token

.PHONY: images-deploy compose-tool compose-up compose-creds compose-down test-compose

images-deploy: setup build ## Build every image docker-compose.yml uses: paddock, nats, redis, test, sandbox
	@scripts/build-images.sh test sandbox paddock nats redis

compose-tool: ## Install Debian's docker-compose (1.29) when no docker-compose is on PATH
	@command -v $(COMPOSE) >/dev/null || { \
	  echo "installing docker-compose …"; \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker-compose >/dev/null; }

compose-up: images-deploy compose-tool ## Start the compose fleet (WORKERS=3) on this host's engine, auth on; writes ./compose-dev.creds
	DOCKER_GID=$$(stat -c %g /var/run/docker.sock) PADDOCK_WORKER_USER=65532:65532 \
	  $(COMPOSE) -p $(COMPOSE_PROJECT) up -d --scale worker=$(WORKERS)
	@$(MAKE) --no-print-directory compose-creds

# The dev tenant's credentials and gateway token, out of the `auth` volume
# (the one-shot `auth` service's mounts: busybox from the tools volume),
# written 0600.
compose-creds: compose-tool ## Copy the dev tenant's credentials and gateway token out of the compose fleet into ./compose-dev.creds, ./compose-dev.token (0600)
	@umask 077 && $(COMPOSE) -p $(COMPOSE_PROJECT) run --rm --no-deps -T --entrypoint /tools/busybox auth \
	  cat /state/auth/creds/dev.creds >$(COMPOSE_CREDS).tmp && mv -f $(COMPOSE_CREDS).tmp $(COMPOSE_CREDS) \
	  || { rm -f $(COMPOSE_CREDS).tmp; echo "no dev credentials: is the fleet up (make compose-up)?"; exit 1; }
	@umask 077 && $(COMPOSE) -p $(COMPOSE_PROJECT) run --rm --no-deps -T --entrypoint /tools/busybox auth \
	  cat /state/auth/dev.token >$(COMPOSE_TOKEN).tmp && mv -f $(COMPOSE_TOKEN).tmp $(COMPOSE_TOKEN) \
	  || { rm -f $(COMPOSE_TOKEN).tmp; echo "no dev token: the dev-tenant one-shot makes it (docker-compose -p $(COMPOSE_PROJECT) logs dev-tenant)"; exit 1; }
	@echo "dev tenant credentials in $(COMPOSE_CREDS), its gateway token in $(COMPOSE_TOKEN) (0600; keep them secret). Submit with:"
	@echo "  $(BIN)/paddock --nats-url nats://127.0.0.1:$${NATS_PORT:-4222} --creds $(COMPOSE_CREDS) submit --wait -- 'echo hi'"
	@echo "  curl -H \"Authorization: Bearer \$$(cat $(COMPOSE_TOKEN))\" -H 'Content-Type: application/json' -d '{\"command\":\"echo hi\"}' 'http://127.0.0.1:$${GATEWAY_PORT:-8080}/v1/jobs?wait=60s'"
	@echo "more tenants: $(COMPOSE) -p $(COMPOSE_PROJECT) run --rm admin tenant add NAME --out /out/NAME.creds   (-> ./compose-creds/)"

compose-down: compose-tool ## Stop the compose fleet (data and credential volumes kept; add -v by hand to drop them)
	$(COMPOSE) -p $(COMPOSE_PROJECT) down --timeout 90

test-compose: images-deploy compose-tool ## Compose fleet test: 3 workers, 200 jobs, one worker killed mid-run (~2 min; part of make test)
	PADDOCK_COMPOSE_JOBS=200 PADDOCK_COMPOSE_KILL=1 PADDOCK_COMPOSE_NO_BUILD=1 \
	  $(GO) test -count=1 -v -run 'TestCompose$$' -timeout 30m ./deploy/

# ---- Deploy: the HA topology (docker-compose.yml + docker-compose.ha.yml): 3 NATS
# nodes (R3 streams), Redis primary + replica + 3 Sentinels. Its own project name:
# `paddock` may be another fleet on this engine.
COMPOSE_HA_PROJECT ?= paddock-ha
COMPOSE_HA = $(COMPOSE) -p $(COMPOSE_HA_PROJECT) -f docker-compose.yml -f docker-compose.ha.yml
# The image the HA test runs (a tag of its own: other fleets keep theirs).
PADDOCK_HA_IMAGE ?= paddock/paddock:ha

.PHONY: compose-ha-up compose-ha-down test-compose-ha

compose-ha-up: images-deploy compose-tool ## Start the HA compose fleet (3 NATS, Redis + 3 Sentinels, WORKERS=3), auth on; writes ./compose-dev.creds
	DOCKER_GID=$$(stat -c %g /var/run/docker.sock) PADDOCK_WORKER_USER=65532:65532 \
	  $(COMPOSE_HA) up -d --scale worker=$(WORKERS)
	@$(MAKE) --no-print-directory compose-creds COMPOSE_PROJECT=$(COMPOSE_HA_PROJECT)

compose-ha-down: compose-tool ## Stop the HA compose fleet (volumes kept; add -v by hand to drop them)
	$(COMPOSE_HA) down --timeout 90

test-compose-ha: setup compose-tool ## HA compose test: 200 jobs, the jobs stream's NATS leader and the Redis primary killed mid-run (~7-8 min)
	@scripts/build-images.sh test sandbox nats redis
	PADDOCK_IMAGE=$(PADDOCK_HA_IMAGE) scripts/build-images.sh paddock
	PADDOCK_IMAGE=$(PADDOCK_HA_IMAGE) PADDOCK_COMPOSE_HA=1 PADDOCK_COMPOSE_JOBS=$${PADDOCK_COMPOSE_JOBS:-200} \
	  PADDOCK_COMPOSE_NO_BUILD=1 $(GO) test -count=1 -v -run 'TestComposeHA$$' -timeout 40m ./deploy/
