"A resolved `EnvSpec` travels down: functions given one look nothing up again, ids still work, trainings resolve once."
import sys
import pytest
import ppo_trt.envs.specs as specs
from ppo_trt.core.files import BadInputError
from ppo_trt.envs.specs import SPECS, as_spec, env_id_of
from ppo_trt.envs.gym import make_env, check_randomize, check_phases, env_phases, Randomized
from ppo_trt.envs.batched.mujoco import batched_mujoco, GymnasiumBatched, mujoco_batch_missing
from ppo_trt.train.fast_ppo import fast_train, FastTrainConfig
from ppo_trt.train import sb3


@pytest.fixture
def lookups(monkeypatch):
    "The ids `env_spec` is asked for, wherever the package bound it."
    real, calls = specs.env_spec, []
    def counted(env_id): calls.append(env_id); return real(env_id)
    for name, mod in list(sys.modules.items()):
        if name.startswith('ppo_trt') and getattr(mod, 'env_spec', None) is real:
            monkeypatch.setattr(mod, 'env_spec', counted)
    return calls


def test_as_spec():
    hopper = SPECS['Hopper-v4']
    assert as_spec(hopper) is hopper and as_spec('Hopper-v4') is hopper
    assert env_id_of(hopper) == env_id_of('Hopper-v4') == 'Hopper-v4'
    with pytest.raises(BadInputError, match='did you mean Hopper-v4'): as_spec('Hoper-v4')
    with pytest.raises(BadInputError, match='unknown environment id None'): as_spec(None)


def test_a_spec_given_is_not_looked_up(lookups):
    hopper, walker = SPECS['Hopper-v4'], SPECS['Walker2d-v4']
    ranges = check_randomize(hopper, 'all')
    assert check_phases('push,mass', hopper) == ['push', 'mass'] and 'push' in env_phases(hopper)
    env = Randomized(make_env(hopper), ranges, 0, hopper); env.reset(seed=0); env.close()
    batched, how = batched_mujoco(hopper, 2, 0, 'all', 1)
    assert batched.env_id == 'Hopper-v4' and mujoco_batch_missing(hopper) == mujoco_batch_missing('Hopper-v4')
    assert GymnasiumBatched(walker, 2, 0, 'mass,push').env_id == 'Walker2d-v4'
    assert lookups == []
    assert check_randomize('Hopper-v4', 'all') == ranges and lookups == ['Hopper-v4']  # an id: looked up once
    batched_mujoco('Walker2d-v4', 2, 0, 'mass,push', 1)
    assert lookups == ['Hopper-v4', 'Walker2d-v4']


def test_a_spec_of_another_env_is_not_trusted(lookups):
    "Randomized checks against its env's own spec when the one given names another env."
    pendulum = make_env('InvertedPendulum-v4'); lookups.clear()
    env = Randomized(pendulum, 'all', 0, SPECS['Hopper-v4'])
    assert 'push' not in env.ranges and lookups == ['InvertedPendulum-v4']
    env.close()


def test_unknown_ids_still_one_line():
    with pytest.raises(BadInputError, match="unknown environment id 'Swimmer-v9'"): batched_mujoco('Swimmer-v9', 2)
    with pytest.raises(BadInputError, match='did you mean Hopper-v4'): make_env('Hoper-v4')
    with pytest.raises(BadInputError, match='did you mean Hopper-v4'): check_randomize('Hoper-v4', 'all')


def test_trainings_resolve_their_spec_once(lookups, tmp_path):
    "A fast Hopper training randomized in every knob, and an SB3 one: the spec is looked up at most twice."
    fast_train(tmp_path/'fast', FastTrainConfig('Hopper-v4', 4096, randomize='all', num_threads=1, progress=False))
    assert set(lookups) == {'Hopper-v4'} and len(lookups) <= 2, lookups
    lookups.clear()
    sb3.train(tmp_path/'sb3', sb3.SB3TrainConfig('Hopper-v4', preset_name='smoke', timesteps=1024, randomize='all',
                                                  progress=False))
    assert lookups == ['Hopper-v4']
