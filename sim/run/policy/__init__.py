"""A trained policy's uses: play (evaluate, film, test its robustness), export (ONNX or numpy),
video, sim2sim (the policy in native MuJoCo), teacher (a run's policy handed to a distilling agent)."""
