-- The Swarm shape of a stack's plan (internal to sandstack.swarm). The C core makes it
-- (csrc/stack/swarm_plan.c, through model:swarm_plan): the same model and plan as
-- sandstack.docker's, each container re-expressed as a finished service create, the sandbox and
-- egress networks as overlays, the forwarder and its publish network left as planned (they are
-- made on the chosen node's own engine). What Swarm cannot express is refused there, as
-- compose/invalid_option naming the option. This file only names the call.
local M = {}

M.ENGINE_LABEL = "io.sandstack.engine" -- on a node: the address of its own Engine API

-- M.plan(model, args) -> plan | nil, err
-- args: api_version, redact, constraints (the operator's), node_id (pins every service after the
-- first to that node). plan.swarm = {
--   project, overlays = { {key =, name =, create =} },        -- created on the manager
--   services = { {service =, name =, role =, image =, depends_on =, check =, check_timeout =,
--                 healthcheck =, create =} },                -- in dependency order
--   local_networks = { <the plan's publish network> },        -- on the chosen node
--   forwarder = <the plan's forwarder container>,             -- on the chosen node
--   volumes = { names }, nnp = bool, reservation = { NanoCPUs =, MemoryBytes = } }
-- Each create is a finished request {method, path, body_json}, sent as it is.
function M.plan(model, args) return model:swarm_plan(args) end

return M
