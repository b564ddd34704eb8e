"""The robot tasks' table, apart from `envs.robots` so that listing names imports no physics."""

from typing import NamedTuple


class RobotTask(NamedTuple):
    folders: tuple[str, ...]  # the MuJoCo Menagerie folders it reads
    episode_length: int  # its config's time limit, in physics control steps
    action_repeat: int = 1  # its config's (Playground applies it in its training wrapper; a run does here)
    privileged: bool = False  # its observation is {"state", "privileged_state"}, not one array
    backends: tuple[str, ...] = ("mjx", "warp")  # MJX's JAX implementation, MuJoCo Warp (where its config offers it)
    randomizer: bool = False  # Playground has a domain randomiser for it (`registry.get_domain_randomizer`)
    command: bool = False  # a joystick task: it draws a velocity command (VX, VY, YAW) to follow (`sample_command`)


# Every locomotion and manipulation task of playground 0.2 (its `locomotion.ALL_ENVS` and
# `manipulation.ALL_ENVS`; tests/test_robots.py checks the two agree): the Menagerie folders
# it reads and what its config fixes; the two tables are the two kinds.
LOCOMOTION = {
    "ApolloJoystickFlatTerrain": RobotTask(("apptronik_apollo",), 1000, privileged=True, command=True),
    "BarkourJoystick": RobotTask(("google_barkour_vb",), 1000, command=True),
    "BerkeleyHumanoidJoystickFlatTerrain": RobotTask(("berkeley_humanoid",), 1000, privileged=True, randomizer=True,
                                                     command=True),
    "BerkeleyHumanoidJoystickRoughTerrain": RobotTask(("berkeley_humanoid",), 1000, privileged=True, randomizer=True,
                                                      command=True),
    "G1JoystickFlatTerrain": RobotTask(("unitree_g1",), 1000, privileged=True, randomizer=True, command=True),
    "G1JoystickRoughTerrain": RobotTask(("unitree_g1",), 1000, privileged=True, randomizer=True, command=True),
    "Go1JoystickFlatTerrain": RobotTask(("unitree_go1",), 1000, privileged=True, randomizer=True, command=True),
    "Go1JoystickRoughTerrain": RobotTask(("unitree_go1",), 1000, privileged=True, randomizer=True, command=True),
    "Go1Getup": RobotTask(("unitree_go1",), 300, privileged=True, randomizer=True),
    "Go1Handstand": RobotTask(("unitree_go1",), 500, privileged=True, randomizer=True),
    "Go1Footstand": RobotTask(("unitree_go1",), 500, privileged=True, randomizer=True),
    "H1InplaceGaitTracking": RobotTask(("unitree_h1",), 1000),
    "H1JoystickGaitTracking": RobotTask(("unitree_h1",), 1000, command=True),
    "Op3Joystick": RobotTask(("robotis_op3",), 1000, command=True),
    "SpotFlatTerrainJoystick": RobotTask(("boston_dynamics_spot",), 1000, privileged=True, command=True),
    "SpotGetup": RobotTask(("boston_dynamics_spot",), 300),
    "SpotJoystickGaitTracking": RobotTask(("boston_dynamics_spot",), 1000, command=True),
    "T1JoystickFlatTerrain": RobotTask(("booster_t1",), 1000, privileged=True, randomizer=True, command=True),
    "T1JoystickRoughTerrain": RobotTask(("booster_t1",), 1000, privileged=True, randomizer=True, command=True),
}
MANIPULATION = {
    "AlohaHandOver": RobotTask(("aloha",), 250),
    "AlohaSinglePegInsertion": RobotTask(("aloha",), 1000, action_repeat=2),
    "PandaPickCube": RobotTask(("franka_emika_panda",), 150),
    "PandaPickCubeOrientation": RobotTask(("franka_emika_panda",), 150),
    "PandaPickCubeCartesian": RobotTask(("franka_emika_panda",), 200),
    "PandaOpenCabinet": RobotTask(("franka_emika_panda",), 150),
    "PandaRobotiqPushCube": RobotTask(("franka_emika_panda", "robotiq_2f85_v4"), 3000, action_repeat=4),
    "LeapCubeReorient": RobotTask(("leap_hand",), 1000, privileged=True, randomizer=True),
    "LeapCubeRotateZAxis": RobotTask(("leap_hand",), 500, privileged=True, randomizer=True),
    "AeroCubeRotateZAxis": RobotTask(("tetheria_aero_hand_open",), 500, privileged=True, backends=("mjx",), randomizer=True),
}
ROBOT_TASKS = {**LOCOMOTION, **MANIPULATION}
