-- GET / with an X-Forwarded-For address taken in turn from N distinct
-- addresses; N is the first script argument (default 1), and the second the
-- index of the first address (default 0: 10.0.0.0 upwards), so that two
-- loads can use keys apart. Requests are formatted once in init, so one key
-- and 10,000 keys cost the load generator the same.
local requests = {}
local count = 0
local next_index = 0

function init(args)
  local n = tonumber(args[1]) or 1
  local first = tonumber(args[2]) or 0
  for k = first, first + n - 1 do
    local ip = string.format("10.%d.%d.%d", math.floor(k / 65536) % 256, math.floor(k / 256) % 256, k % 256)
    requests[k - first + 1] = wrk.format("GET", "/", { ["X-Forwarded-For"] = ip })
  end
  count = n
end

function request()
  next_index = next_index % count + 1
  return requests[next_index]
end
