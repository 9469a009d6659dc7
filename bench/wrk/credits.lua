-- wrk script for bench/credits_http_bench.py (issue 2): every request is a new, unique credit.
--
--   wrk -t2 -c16 -d10s --latency -s bench/wrk/credits.lua http://127.0.0.1:8000 -- credit TENANT RUN
--   wrk -t2 -c16 -d10s --latency -s bench/wrk/credits.lua http://127.0.0.1:8002 -- hello
--
-- credit mode: POST /v1/tenants/TENANT/credits with idempotency_key "RUN-<thread>-<counter>"
-- and one line of amount_minor = counter % 97 + 1. Each thread keeps the keys it sent and not
-- yet saw answered (responses carry their key), counts statuses and sums the amounts of 201
-- responses. done() prints one line "BENCH_JSON {...}" with those, per thread, so the harness
-- can replay the keys still in flight when wrk stopped and check the server's balance against
-- the sum of what was acknowledged.
-- hello mode: GET / (the framework's hello world); statuses are counted the same way.

local threads = {}
local next_id = 1

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  mode = args[1] or "credit"
  tenant = args[2] or "bench"
  run = args[3] or "run"
  counter = 0
  sum201 = 0
  outstanding = {}
  statuses = {}
  path = "/v1/tenants/" .. tenant .. "/credits"
  headers = { ["Content-Type"] = "application/json" }
  if mode == "hello" then
    hello_request = wrk.format("GET", "/")
  end
end

function request()
  if mode == "hello" then
    return hello_request
  end
  counter = counter + 1
  local key = run .. "-" .. id .. "-" .. counter
  local amount = counter % 97 + 1
  outstanding[key] = amount
  local body = '{"idempotency_key":"' .. key .. '","lines":[{"desc":"bench","amount_minor":'
    .. amount .. ',"currency":"USD"}]}'
  return wrk.format("POST", path, headers, body)
end

function response(status, headers, body)
  local name = tostring(status)
  statuses[name] = (statuses[name] or 0) + 1
  if mode == "hello" or (status ~= 201 and status ~= 200) then
    return
  end
  local key = string.match(body, '"idempotency_key":%s*"([^"]*)"')
  local amount = tonumber(string.match(body, '"amount_minor":%s*(%d+)'))
  if key ~= nil and outstanding[key] ~= nil then
    outstanding[key] = nil
    if status == 201 and amount ~= nil then
      sum201 = sum201 + amount
    end
  end
end

local function json_string(text)
  return '"' .. string.gsub(text, '["\\]', "\\%0") .. '"'
end

function done(summary, latency, requests)
  local parts = {}
  for _, thread in ipairs(threads) do
    local statuses_json = {}
    for code, count in pairs(thread:get("statuses") or {}) do
      table.insert(statuses_json, json_string(code) .. ":" .. string.format("%d", count))
    end
    local pending = {}
    for key, amount in pairs(thread:get("outstanding") or {}) do
      table.insert(pending, "[" .. json_string(key) .. "," .. string.format("%d", amount) .. "]")
    end
    table.insert(parts, string.format(
      '{"id":%d,"sent":%d,"sum201":%d,"statuses":{%s},"outstanding":[%s]}',
      thread:get("id"), thread:get("counter") or 0, thread:get("sum201") or 0,
      table.concat(statuses_json, ","), table.concat(pending, ",")))
  end
  local errors = summary.errors
  io.write(string.format(
    'BENCH_JSON {"duration_us":%d,"requests":%d,"bytes":%d,"errors":{"connect":%d,"read":%d,"write":%d,'
      .. '"status":%d,"timeout":%d},"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d},"threads":[%s]}\n',
    summary.duration, summary.requests, summary.bytes, errors.connect, errors.read, errors.write,
    errors.status, errors.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, table.concat(parts, ",")))
end
