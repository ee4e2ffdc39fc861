-- ff_version: the library version probe. Bumped whenever a KEYS/ARGV shape
-- changes or a function is added; FlowFabric clients compare it verbatim.
redis.register_function('ff_version', function(keys, args)
  return '34'
end)
